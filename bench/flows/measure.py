"""The flow of a measuring command (`bench sweep`, `bench capacity`): flags or run directories to resume ->
one run per engine -> what was measured reported, and every failure named, as an `Outcome` the command prints.
Nothing here prints: lines for the person running it go through the command's `Say` and `JobWatcher`.

An engine that fails to start or stops answering does not end the command: the other engines still run,
their results are printed and reported, the failure is named at the end, and the exit code is 1 (2 when
nothing could be measured at all, as for a bad flag); `--resume` with the run directories then runs only
what is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from bench.flows.capacity import CapacityAsk, CapacityPlan, capacity_plan
from bench.flows.sweep import SweepPlan, SweepProgress, SweepResult, run_sweep
from bench.inputs.flag_text import listed
from bench.inputs.measure_options import MeasureFlags
from bench.inputs.options import LoadOverrides, scenario_overrides
from bench.inputs.overrides import build_scenario
from bench.inputs.rules import first_line
from bench.inputs.scenario import Scenario
from bench.run import rundir
from bench.run.resume import Resume, ResumeError, launch_preview, open_run, prepare
from bench.run.rundir import Run
from common.secrets import REDACTED
from engines.endpoint import read_api_key
from engines.engine_file import EngineFile, load_engine_file
from engines.types import Launcher
from loadgen.adapters import plan_adapters
from loadgen.datasets import PromptTokenizer
from loadgen.pool import ClientPool
from loadgen.replay.requests import Replay
from loadgen.sessions.model import SessionSet
from loadgen.structured import Structure
from loadgen.types import SLO, LevelSummary

DEFAULT_SCENARIO = "chat"

# After each level, a line about its summary (None: the level measured nothing), or None to say nothing.
Describe = Callable[[LevelSummary | None], str | None]
# A line for the person running the command (the command prints it, plain text).
Say = Callable[[str], None]


def silent(line: str) -> None:
    """A `Say` for callers that show nothing."""


@dataclass(frozen=True)
class Job:
    plan: SweepPlan
    launcher: Launcher
    resume: Resume | None = None


class JobWatcher(Protocol):
    """What the command shows while jobs run: each job's progress, a plain line, an engine that failed while
    others still run."""

    def progress(self, job: Job) -> AbstractContextManager[SweepProgress | None]: ...

    def say(self, line: str) -> None: ...

    def failed(self, engine: str, reason: str) -> None: ...


class Silent:
    """A `JobWatcher` that shows nothing (a library caller, a test)."""

    def progress(self, job: Job) -> AbstractContextManager[SweepProgress | None]:
        return nullcontext()

    def say(self, line: str) -> None:
        pass

    def failed(self, engine: str, reason: str) -> None:
        pass


@dataclass(frozen=True)
class Reports:
    """The reports written at the end: each run's, the comparison of several, or why (the rest) could not be."""

    written: tuple[Path, ...] = ()
    comparison: Path | None = None
    problem: str | None = None


@dataclass(frozen=True)
class Outcome:
    results: tuple[SweepResult, ...]
    failures: tuple[tuple[str, str], ...]  # engine, what went wrong
    already_complete: tuple[Path, ...] = ()
    reports: Reports | None = None  # None: none asked for (--no-report), or nothing measured

    @property
    def exit_code(self) -> int:
        """0: all measured; 1: an engine failed, the others measured; 2: nothing measured (as for a bad flag)."""
        return 0 if not self.failures else 1 if self.results else 2


UI_KIND = "openwebui"  # `--engine openwebui`: the reference engine, direct and through Open WebUI


def fresh_jobs(flags: MeasureFlags, levels: LoadOverrides | None = None, capacity: CapacityPlan | None = None,
               adjust: Callable[[Scenario], Scenario] | None = None, say: Say = silent) -> list[Job]:
    """One job per engine given (by kind or engine file); raises ValueError-like errors naming the flag."""
    from engines.process import parse_engine_args
    from engines.registry import make_launcher
    from engines.replicas import check_replicas

    scenario = build_scenario(flags.scenario or DEFAULT_SCENARIO, scenario_overrides(flags, levels))
    scenario = adjust(scenario) if adjust else scenario
    if (rules := first_line(scenario)) is not None:  # before anything runs: whether the numbers will be comparable
        say(rules)
    tokenizer = _load_tokenizer(flags.tokenizer)
    replay = load_replay(scenario, tokenizer)
    sessions = load_sessions(scenario)
    adapters = plan_adapters(scenario.workload.adapters, scenario.workload.seed)
    structure = load_structured(scenario)
    kinds = flags.engine or ([] if flags.engine_file else ["reference"])
    through_ui = flags.through_ui or UI_KIND in kinds
    kinds = [kind for kind in kinds if kind != UI_KIND] or ([] if flags.engine_file else ["reference"])
    replicas = flags.replicas if flags.replicas is not None else 1
    check_replicas(replicas, flags.router_policy or "round_robin")
    specs = [EngineFile(engine=kind, model=flags.model, base_url=flags.base_url, api_key_env=flags.api_key_env,
                        port=flags.port, args=parse_engine_args(flags.engine_arg or []), replicas=replicas,
                        router_policy=flags.router_policy or "round_robin",
                        router_args=parse_engine_args(flags.router_arg or []),
                        replica_metrics=listed(flags.replica_metrics)) for kind in kinds]
    specs += [load_engine_file(path) for path in flags.engine_file or []]
    specs = [_with_served_model(spec, say) for spec in specs]
    if adapters is not None and adapters.served:  # the adapters go to every engine bench starts
        specs = [spec.model_copy(update={"lora": {**adapters.served, **spec.lora}}) for spec in specs]
    if through_ui:  # each engine direct first, then with the UI in front: the same workload both ways
        specs += [spec.model_copy(update={"ui": True, "ui_python": flags.ui_python,
                                          "name": f"{spec.name or spec.engine}+{UI_KIND}"}) for spec in specs]
    for spec in specs:
        read_api_key(spec.api_key_env)  # a key named but not set is a bad flag: said before anything starts
    clients = client_pool(flags.workers, flags.ray)
    return [Job(SweepPlan(scenario, flags.out, engine_kind=spec.name or spec.engine, strict_openai=flags.strict_openai,
                          tokenizer=tokenizer, tokenizer_path=str(flags.tokenizer) if flags.tokenizer else None,
                          repeats=flags.repeats or 1, capacity=capacity, engine_spec=spec.model_dump(mode="json"),
                          replay=replay, sessions=sessions, clients=clients, adapters=adapters,
                          structure=structure),
                make_launcher(spec)) for spec in specs]


def capacity_jobs(flags: MeasureFlags, ask: CapacityAsk, say: Say = silent) -> list[Job]:
    """A capacity search's job per engine: the search `ask` sets up, its SLO written into the scenario each run
    keeps (run.json and the report judge by it)."""
    levels = LoadOverrides(burstiness=ask.burstiness, max_concurrency=ask.max_concurrency)
    scenario = build_scenario(flags.scenario or DEFAULT_SCENARIO, scenario_overrides(flags, levels))
    plan = capacity_plan(ask, scenario, flags.repeats)
    return fresh_jobs(flags, levels, plan, lambda s: with_slo(s, plan.slo, plan.attainment_target), say)


def _with_served_model(spec: EngineFile, say: Say) -> EngineFile:
    """An endpoint given no --model: the one model it serves, said before anything runs."""
    from engines.registry import with_served_model

    chosen = with_served_model(spec)
    if chosen.model != spec.model:
        say(f"--model not given: {spec.base_url} serves one model, {chosen.model!r}")
    return chosen


def client_pool(workers: int | None, ray: str | None) -> ClientPool:
    """--workers and --ray checked before anything starts."""
    if workers is not None and workers < 1:
        raise ValueError(f"--workers {workers}: expected a whole number >= 1")
    if ray is not None:
        from loadgen.ray_workers import require_ray

        require_ray(ray)
    return ClientPool(workers or 1, ray)


def resumed_jobs(flags: MeasureFlags, command: str, other_flags: list[str],
                 say: Say = silent) -> tuple[list[Job], list[Path]]:
    """The jobs that go on with `flags.resume`'s run directories, and those already complete."""
    checked, complete = resumable(flags, command, other_flags, say)
    return [replace(job, resume=prepare(run_dir, run)) for run_dir, run, job in checked], complete


def resumable(flags: MeasureFlags, command: str, other_flags: list[str],
              say: Say = silent) -> tuple[list[tuple[Path, rundir.RunInfo, Job]], list[Path]]:
    """Each of `flags.resume`'s run directories not yet complete, checked as a resume is (its job not yet told
    where its levels stand: its files are as they were), and those already complete."""
    from engines.registry import make_launcher

    checked, complete = [], []
    for run_dir in flags.resume or []:
        run = open_run(run_dir, command)
        check_unchanged(run_dir, run, flags, other_flags)
        if run.status == "complete":
            complete.append(run_dir)
            continue
        spec, scenario = run.engine_spec, run.scenario
        assert spec is not None and scenario is not None  # open_run refuses a run without them
        _check_no_secret_left_out(run_dir, spec)
        tokenizer_path = run.client.tokenizer
        tokenizer = _load_tokenizer(Path(tokenizer_path) if tokenizer_path else None)
        replay = load_replay(scenario, tokenizer)
        sessions = load_sessions(scenario)
        read = (replay.dataset.sha256, replay.dataset.path) if replay is not None else \
            (sessions.sha256, sessions.path) if sessions is not None else None
        if read is not None and run.dataset and run.dataset.sha256 != read[0]:
            raise ResumeError(f"--resume {run_dir}: {read[1]} changed since that run began (its sha256 "
                              "differs); start a new run")
        plan = SweepPlan(scenario, run_dir.parent, engine_kind=spec.name or spec.engine,
                         strict_openai=run.client.strict_openai, tokenizer=tokenizer, tokenizer_path=tokenizer_path,
                         repeats=run.plan.repeats, capacity=run.plan.capacity,
                         engine_spec=spec.model_dump(mode="json"), replay=replay, sessions=sessions,
                         clients=client_pool(run.client.workers, run.client.ray),
                         adapters=plan_adapters(scenario.workload.adapters, scenario.workload.seed),
                         structure=load_structured(scenario))
        launcher = make_launcher(spec)
        shown = [f"resuming {run_dir}, which launches what its run.json says:", *launch_preview(spec)]
        say("\n  ".join(shown))  # before anything runs
        checked.append((run_dir, run, Job(plan, launcher)))
    return checked, complete


def _check_no_secret_left_out(run_dir: Path, spec: EngineFile) -> None:
    """A secret the run was launched with is not in run.json (`***`): it can't be launched again with it."""
    hidden = [f"--engine-arg {key}" for key, value in spec.args.items() if value == REDACTED]
    hidden += [f"env {name}" for name, value in spec.env.items() if value == REDACTED]
    if hidden:
        raise ResumeError(f"--resume {run_dir}: that run was given {', '.join(hidden)} as a value, and run.json keeps "
                          "no secret; start a new run giving it as a reference, ${NAME} (an environment variable "
                          "read at launch), so that a resume can read it again")


def check_unchanged(run_dir: Path, run: rundir.RunInfo, flags: MeasureFlags, other_flags: list[str]) -> None:
    """A resumed run keeps its own engine, scenario and settings: a flag that would change them is refused."""
    spec = run.engine_spec
    assert spec is not None  # open_run refuses a run without it
    if flags.engine and flags.engine != [spec.engine]:
        raise ResumeError(f"--resume {run_dir}: that run measured engine '{spec.name or spec.engine}', not "
                          f"'{', '.join(flags.engine)}'; drop --engine (a resumed run keeps its own engine)")
    scenario = run.scenario.name if run.scenario else None
    if flags.scenario and Path(flags.scenario).stem != scenario:
        raise ResumeError(f"--resume {run_dir}: that run measured scenario '{scenario}', not '{flags.scenario}'; "
                          "drop --scenario (a resumed run keeps its own scenario)")
    given = [flag for flag in [*flags.given(), *other_flags] if flag not in ("--engine", "--scenario")]
    if given:
        raise ResumeError(f"--resume {run_dir}: drop {', '.join(given)}: a resumed run keeps the settings in its "
                          "run.json")


def run_jobs(jobs: list[Job], watch: JobWatcher | None = None) -> Outcome:
    """Each job in turn; an engine that fails to start or stops answering is named and the rest go on.
    Ctrl-C (or SIGTERM, SIGHUP) ends them all: KeyboardInterrupt is the caller's."""
    from engines.endpoint import EndpointError
    from engines.launch import EngineGone, EngineStartError
    from engines.registry import EngineError
    from loadgen.pool import WorkerFailed
    from loadgen.replay.formats import DatasetError

    watch = watch or Silent()
    results, failures = [], []
    for job in jobs:
        if job.resume is not None and job.resume.discarded:
            watch.say(f"resuming {job.resume.run_dir.name}: {len(job.resume.finished)} level(s) kept; "
                      f"{', '.join(job.resume.discarded)} cut short, run again")
        if job.resume is not None and (moved := job.resume.moved) is not None:
            watch.say(f"warning: {job.resume.run_dir.name} is resumed on other hardware, {moved}: its levels so far "
                      "were measured there, the rest are measured here, and its report says which ran where")
        try:
            with watch.progress(job) as progress:
                results.append(run_sweep(job.plan, job.launcher, progress, job.resume))
        except (EndpointError, EngineError, EngineStartError, EngineGone, DatasetError, WorkerFailed) as exc:
            if job is not jobs[-1]:  # said at once when other engines still run; at the end in any case
                watch.failed(job.plan.engine_kind, str(exc))
            failures.append((job.plan.engine_kind, str(exc)))
    return Outcome(tuple(results), tuple(failures))


def write_reports(run_dirs: list[Path | Run], out: Path) -> Reports:
    """One report per run, and one that compares them when several engines ran (a run given as a sweep read it
    is not read again). A report that can't be made (e.g. the scenario names no GPU price) is named as the
    problem: the measurements are safe."""
    from bench.flows.report import ReportError, render_report, render_run_report
    from costmodel.prices import PriceError

    written: list[Path] = []
    try:
        for run_dir in run_dirs:
            if (path := render_run_report(run_dir)) is not None:
                written.append(path)
        if len(run_dirs) > 1:
            first = run_dirs[0].run_dir if isinstance(run_dirs[0], Run) else run_dirs[0]
            combined = render_report(run_dirs, out / f"compare-{first.name}.html")
            return Reports(tuple(written), combined.files.html)
    except (ReportError, PriceError) as exc:
        return Reports(tuple(written), problem=str(exc))
    return Reports(tuple(written))


def load_replay(scenario: Scenario, tokenizer: PromptTokenizer | None) -> Replay | None:
    """The scenario's dataset read and prepared (raises DatasetError, a ValueError, naming line and field)."""
    dataset = scenario.workload.dataset
    if dataset is None or dataset.is_sessions:
        return None
    from loadgen.replay.formats import read_dataset
    from loadgen.replay.requests import prepare_replay

    workload = scenario.workload
    return prepare_replay(read_dataset(dataset.path, dataset.format), dataset, workload.output_tokens, workload.seed,
                          tokenizer)


def load_structured(scenario: Scenario) -> Structure | None:
    """The shape the scenario asks its answers in, its files read and checked (StructureError names the file)."""
    settings = scenario.workload.structured
    if settings is None:
        return None
    from loadgen.structured import load_structure

    return load_structure(settings)


def load_sessions(scenario: Scenario) -> SessionSet | None:
    """The scenario's agent sessions: a session dataset read (raises DatasetError naming the file, the line or
    session, and the field), or the synthetic workload's drawn; None for a workload of single requests."""
    workload = scenario.workload
    if workload.agent is not None:
        from loadgen.sessions.synthetic import draw_sessions

        return draw_sessions(workload.agent, workload.seed)
    dataset = workload.dataset
    if dataset is None or not dataset.is_sessions:
        return None
    from loadgen.sessions.formats import read_sessions

    block = dataset.block_tokens if "block_tokens" in dataset.model_fields_set else None
    return read_sessions(dataset.path, dataset.format, block)


def _load_tokenizer(path: Path | None) -> Any:
    if path is None:
        return None
    if not path.is_file():
        raise ValueError(f"--tokenizer {path}: no such file (expected a Hugging Face tokenizer.json)")
    from loadgen.datasets import TokenizerFile

    return TokenizerFile(path)


def with_slo(scenario: Scenario, slo: SLO, attainment_target: float | None) -> Scenario:
    """The scenario with the SLO a capacity search judges by, so run.json and the report carry it."""
    pricing = scenario.pricing if attainment_target is None else \
        scenario.pricing.model_copy(update={"slo_attainment_target": attainment_target})
    return scenario.model_copy(update={"slo": slo, "pricing": pricing})
