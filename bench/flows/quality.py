"""`bench quality`: one eval asked of each engine the same way, graded, and the engines compared answer by answer.

    flags -> the eval read once -> one run per engine (greedy, every line once, at --concurrency, the answers
    fingerprinted, never kept as text) -> quality.json in each run directory -> paired comparisons with the
    first engine (or the --against reference): which items changed, and the McNemar p of the change

Each run is an ordinary run directory (`bench report` and `bench summarize` read it); `quality.json` adds the
eval's scores by grader and by category, and the comparison with the baseline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.flows import measure
from bench.inputs.measure_options import MeasureFlags
from bench.inputs.options import LoadOverrides
from bench.inputs.scenario import Scenario
from bench.run import rundir
from loadgen.quality.results import Agreement, EvalItem, Paired, RunAnswers, Scores, agreement, paired, score
from loadgen.recorder import read_records
from loadgen.replay.requests import Replay

QUALITY_SCENARIO = "quality"


class QualityError(ValueError):
    """A flag or a run directory that can't be used, said in one line naming it."""


@dataclass(frozen=True)
class QualityPlan:
    eval_path: Path | None  # None: the scenario's dataset (the shipped eval)
    concurrency: int = 1
    against: str | None = None  # a run directory, an engine file, or an engine kind
    logprobs: bool = False


@dataclass(frozen=True)
class QualityRun:
    run_dir: Path
    answers: RunAnswers
    scores: Scores
    paired: Paired | None = None  # against the baseline (None: this run is the baseline)
    agreement: Agreement | None = None

    @property
    def name(self) -> str:
        return self.answers.name


@dataclass
class QualityOutcome:
    runs: list[QualityRun]
    baseline: QualityRun | None  # what the others are compared with: --against, else the first run
    failures: list[tuple[str, str]]


def quality_flags(flags: MeasureFlags, plan: QualityPlan) -> MeasureFlags:
    if plan.eval_path is not None and flags.dataset is not None:
        raise QualityError("give the eval as --eval FILE, not --dataset")
    if plan.concurrency < 1:
        raise QualityError(f"--concurrency {plan.concurrency}: expected a whole number >= 1")
    if plan.eval_path is not None and not plan.eval_path.is_file():
        raise QualityError(f"--eval {plan.eval_path}: no such file (a JSONL eval: one {{\"prompt\" or "
                           "\"messages\", \"answer\", \"grader\", \"category\"} a line)")
    return replace(flags, scenario=flags.scenario or QUALITY_SCENARIO, dataset=plan.eval_path or flags.dataset)


def asked_once(scenario: Scenario, plan: QualityPlan) -> Scenario:
    """The scenario as an eval asks it: every line once, greedy, to its end (no ignore_eos), no warm-up, answers
    fingerprinted; one closed-loop level at the plan's concurrency."""
    if scenario.workload.dataset is None or scenario.workload.dataset.is_sessions:
        raise QualityError(f"scenario '{scenario.name}' names no eval: add --eval FILE (JSONL with answers)")
    replay = measure.load_replay(scenario, None)
    assert replay is not None
    workload = scenario.workload.model_copy(update={"temperature": 0.0, "ignore_eos": False,
                                                    "fingerprint_answers": True, "logprobs": plan.logprobs})
    load = scenario.load.model_copy(update={"concurrency": [plan.concurrency], "rates": [], "duration_s": None,
                                            "requests": replay.num_requests, "warmup_requests": 0})
    return scenario.model_copy(update={"workload": workload, "load": load})


def eval_items(replay: Replay) -> list[EvalItem]:
    items = []
    for item in replay.items:
        grading = item.conversation.grading if item.conversation is not None else None
        items.append(EvalItem(item.index, grading.grader if grading else None, grading.category if grading else None))
    return items


def quality_jobs(flags: MeasureFlags, plan: QualityPlan,
                 say: measure.Say = measure.silent) -> tuple[list[measure.Job], measure.Job | Path | None]:
    """One job per engine; and the --against reference: a job of its own (an engine kind or file), or a run
    directory."""
    flags = quality_flags(flags, plan)
    adjust = lambda scenario: asked_once(scenario, plan)  # noqa: E731 - one use
    jobs = measure.fresh_jobs(flags, LoadOverrides(), adjust=adjust, say=say)
    if plan.against is None:
        return jobs, None
    against = Path(plan.against)
    if (against / rundir.RUN_FILE).is_file():
        return jobs, against
    if against.suffix in (".yaml", ".yml") and against.is_file():
        reference = replace(flags, engine=None, engine_file=[against])
    elif against.exists():
        raise QualityError(f"--against {against}: neither a run directory (no {rundir.RUN_FILE}) nor an engine "
                           "file (.yaml)")
    else:
        reference = replace(flags, engine=[plan.against], engine_file=None)
    (job,) = measure.fresh_jobs(reference, LoadOverrides(), adjust=adjust, say=say)
    return jobs, job


def run_quality(flags: MeasureFlags, plan: QualityPlan, watch: measure.JobWatcher | None = None) -> QualityOutcome:
    """Every engine asked the eval; each run scored and compared with the baseline; quality.json written.
    The baseline is --against, else the first engine that ran."""
    watch = watch or measure.Silent()
    jobs, against = quality_jobs(flags, plan, watch.say)
    replay = jobs[0].plan.replay
    assert replay is not None  # asked_once refused a scenario without an eval
    items = eval_items(replay)
    failures: list[tuple[str, str]] = []
    baseline: QualityRun | None = None
    if isinstance(against, Path):
        baseline = _read_against(against, items, replay)
    elif against is not None:
        baseline = _run_one(against, items, failures, watch)
    runs = [run for job in jobs if (run := _run_one(job, items, failures, watch)) is not None]
    if baseline is None and against is None and len(runs) > 1:
        baseline, runs = runs[0], runs[1:]
    if baseline is not None:
        runs = [replace(run, paired=paired(baseline.answers, run.answers),
                        agreement=agreement(baseline.answers, run.answers)) for run in runs]
    written = [*([baseline] if baseline is not None and not isinstance(against, Path) else []), *runs]
    for run in written:
        write_quality(run, replay, plan)
    return QualityOutcome(runs, baseline, failures)


def _run_one(job: measure.Job, items: list[EvalItem], failures: list[tuple[str, str]],
             watch: measure.JobWatcher) -> QualityRun | None:
    """One engine asked the eval (None when it failed: the failure is added to `failures`)."""
    outcome = measure.run_jobs([job], watch)
    failures += outcome.failures
    if not outcome.results:
        return None
    return _scored(outcome.results[0].run_dir, job.plan.engine_kind, items)


def _scored(run_dir: Path, name: str, items: list[EvalItem]) -> QualityRun:
    answers = RunAnswers.of(name, read_records(run_dir / rundir.REQUESTS_FILE))
    return QualityRun(run_dir, answers, score(items, answers))


def _read_against(run_dir: Path, items: list[EvalItem], replay: Replay) -> QualityRun:
    """An earlier run as the reference: it must have asked the same file."""
    info = rundir.read_run_info(run_dir)
    asked = info.dataset.sha256 if info.dataset else None
    if asked != replay.dataset.sha256:
        raise QualityError(f"--against {run_dir}: that run asked {info.dataset.path if info.dataset else 'no eval'}"
                           f", not {replay.dataset.path} (the sha256 differs): answers can't be matched")
    name = info.engine_spec.name or info.engine_spec.engine if info.engine_spec else info.engine.name
    return _scored(run_dir, f"{name} ({run_dir.name})", items)


def write_quality(run: QualityRun, replay: Replay, plan: QualityPlan) -> Path:
    info = rundir.read_run_info(run.run_dir)
    body: dict[str, Any] = {
        "engine": info.engine.to_json(),
        "eval": {"path": str(replay.dataset.path), "sha256": replay.dataset.sha256, "items": len(replay.items)},
        "concurrency": plan.concurrency, "temperature": 0.0,
        **run.scores.to_json(),
        "paired": run.paired.to_json() if run.paired else None,
        "agreement": run.agreement.to_json() if run.agreement else None,
    }
    path = run.run_dir / rundir.QUALITY_FILE
    path.write_text(json.dumps(body, indent=2) + "\n")
    return path
