"""The flow of `bench tune`: measure each configuration of one engine in turn, then put them side by side.

A fresh tune checks its flags, makes its folder and writes tune.json (`bench.flows.tune_plan`); `--resume`
reads that folder back with the settings it began with. Each configuration is then a sweep of its own (its
run directory, its report) inside the tune folder, and its state is saved in tune.json after every step; the
tune's table, chart and report are made when the last one ends (`bench.flows.tune_ranking`,
`reports.tune_report`). Nothing here prints: lines go through the command's `TuneWatcher`, and the result comes
back as a `TuneOutcome`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bench.flows import measure
from bench.flows.placed import Placer
from bench.flows.tune_cluster import run_tune_placed
from bench.flows.tune_plan import (
    TUNE_FILE,
    Tune,
    TuneEntry,
    TuneError,
    check_objective,
    parse_grids,
    read_configs,
    with_default,
)
from bench.flows.tune_ranking import (
    ConfigResult,
    accuracy_note,
    best,
    config_result,
    hardware_note,
    objective_figure,
    pareto_front,
)
from bench.inputs.flag_text import given_flags
from bench.inputs.measure_options import MeasureFlags
from bench.inputs.measure_settings import settings_back, settings_of
from bench.inputs.options import LoadOverrides
from bench.run.resume import check_owner
from common.private import make_private_dir


@dataclass(frozen=True)
class TuneAsk:
    """What `bench tune` is asked besides the measuring flags: the configurations, the objective, the levels."""

    grid: list[str] | None = None
    configs: Path | None = None
    objective: str = "capacity"
    concurrency: str | None = None
    rate: str | None = None
    min_accuracy: float | None = None
    cluster: str | None = None  # a Ray cluster's address: each configuration on a node of its own
    gpus_per_config: float | None = None  # None: as the tune began, else 0
    cpus_per_config: float | None = None  # None: as the tune began, else 1


class TuneWatcher(measure.JobWatcher, Protocol):
    """What the command shows while a tune runs: its jobs as a measuring command's, and two lines of its own."""

    def configuration(self, name: str) -> None:
        """A configuration's sweep begins."""

    def warn(self, line: str) -> None:
        """Something the tune goes on without (a configuration's report that could not be written)."""


@dataclass(frozen=True)
class TuneOutcome:
    """A tune that ran to its end (its table, report and the best's decision) or was interrupted (then only
    `plan` and `interrupted`: tune.json says where to go on)."""

    plan: Tune
    results: tuple[ConfigResult, ...] = ()
    chosen: ConfigResult | None = None
    default: ConfigResult | None = None
    num_tried: int = 0
    report: Path | None = None  # tune.html
    decision: Path | str | None = None  # the best's decision report, or why it was not written; None: no best
    num_failed: int = 0
    interrupted: bool = False
    hardware_note: str | None = None  # the configurations were measured on different hardware

    @property
    def exit_code(self) -> int:
        return 1 if self.num_failed else 0


def run_tune(flags: MeasureFlags, ask: TuneAsk, watch: TuneWatcher, placer: Placer | None = None) -> TuneOutcome:
    """A tune begun or resumed, each configuration measured, the tune reported. Raises TuneError (a ValueError)
    naming the flag for what can't be tuned; Ctrl-C during a configuration saves where it was and returns an
    interrupted outcome. With `ask.cluster` (or a `placer`), the configurations run side by side where the
    placer puts them."""
    if ask.cluster is None and placer is None and (ask.gpus_per_config, ask.cpus_per_config) != (None, None):
        raise TuneError("--gpus-per-config and --cpus-per-config say what each configuration asks of a cluster's "
                        "node; give --cluster ADDRESS with them")
    plan, flags, levels = open_tune(flags, ask)
    on_cluster = ask.cluster is not None or placer is not None
    resources = _resources(plan, ask) if on_cluster else {}
    if on_cluster and placer is None:
        placer = _ray_placer(plan, ask, resources)
    watch.say(f"tune {plan.folder}: {len(plan.entries)} configurations of {plan.engine} "
              f"({', '.join(e.config.name for e in plan.entries)})")
    if placer is not None:
        return _run_on_cluster(plan, ask, watch, placer, resources)
    num_failed = 0
    for entry in plan.entries:
        if entry.status == "complete":
            watch.say(f"{entry.config.name}: complete, not run again")
            if entry.run_dir and not (plan.folder / entry.run_dir / "report.json").is_file():
                _report(entry.config.name, plan.folder / entry.run_dir, watch)  # stopped before its report
            continue
        try:
            num_failed += not measure_config(plan, entry, flags, levels, watch)
        except KeyboardInterrupt:
            return TuneOutcome(plan, interrupted=True)
    return dataclasses.replace(_finish(plan), num_failed=num_failed)


def _resources(plan: Tune, ask: TuneAsk) -> dict[str, float]:
    """What each configuration asks of a node: as the tune began (tune.json), or as given (0 GPUs, 1 core)."""
    given = {"gpus_per_config": ask.gpus_per_config, "cpus_per_config": ask.cpus_per_config}
    kept = plan.placement or {}
    for key, value in given.items():
        if value is not None and key in kept and kept[key] != value:
            flag = "--" + key.replace("_", "-")
            raise TuneError(f"{flag} {value:g}: this tune's configurations asked for {kept[key]:g} each when it "
                            f"began, and --resume keeps it; drop {flag}")
    resources = {"gpus_per_config": 0.0, "cpus_per_config": 1.0, **kept,
                 **{k: float(v) for k, v in given.items() if v is not None}}
    if plan.placement != resources:
        plan.placement = resources
        plan.save()
    return resources


def _ray_placer(plan: Tune, ask: TuneAsk, resources: dict[str, float]) -> Placer:
    """Ray's placer on `ask.cluster`; a cluster that can't be used (or Ctrl-C while Ray tries) leaves no new tune
    folder behind."""
    from bench.flows.ray_placer import RayPlacer

    assert ask.cluster is not None
    try:
        return RayPlacer(ask.cluster, resources["gpus_per_config"], resources["cpus_per_config"], "config")
    except BaseException:
        if not any(entry.run_dir for entry in plan.entries):  # a fresh tune: nothing in it but tune.json
            (plan.folder / TUNE_FILE).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                plan.folder.rmdir()
        raise


def _run_on_cluster(plan: Tune, ask: TuneAsk, watch: TuneWatcher, placer: Placer,
                    resources: dict[str, float]) -> TuneOutcome:
    """Every configuration not yet complete on a node of the cluster, side by side (bench.flows.tune_cluster)."""
    watch.say(f"placing {sum(e.status != 'complete' for e in plan.entries)} configurations on the cluster at "
              f"{ask.cluster or 'hand'}, each asking for {resources['gpus_per_config']:g} GPUs and "
              f"{resources['cpus_per_config']:g} CPUs")
    try:
        num_failed = run_tune_placed(plan, placer, watch.say, watch.failed)
    except KeyboardInterrupt:
        return TuneOutcome(plan, interrupted=True)
    for entry in plan.entries:  # a report a node could not write is written here
        if entry.status == "complete" and entry.run_dir and not (plan.folder / entry.run_dir / "report.json").is_file():
            _report(entry.config.name, plan.folder / entry.run_dir, watch)
    return dataclasses.replace(_finish(plan), num_failed=num_failed)


def open_tune(flags: MeasureFlags, ask: TuneAsk) -> tuple[Tune, MeasureFlags, LoadOverrides]:
    """The tune to run, the flags its configurations share and their levels: a new tune folder, or the one
    `--resume` names with the settings it began with."""
    if not flags.report:  # each configuration's sweep is run with report=False, then reported here all the same
        raise TuneError("--no-report: bench tune ranks its configurations by each one's run report (report.json), "
                        "so it always writes them; drop --no-report")
    if flags.resume:
        plan = _resumed(flags, ask)
        flags, concurrency, rate = settings_back(plan.settings)
    else:
        plan, concurrency, rate = _fresh(flags, ask), ask.concurrency, ask.rate
    return plan, flags, LoadOverrides(concurrency=concurrency, rate=rate)


def _resumed(flags: MeasureFlags, ask: TuneAsk) -> Tune:
    """The tune folder `--resume` names, refused with any flag that would change what it began with."""
    assert flags.resume
    own = given_flags({"grid": (ask.grid, None), "configs": (ask.configs, None), "concurrency": (ask.concurrency, None),
                       "rate": (ask.rate, None)})
    given = [f for f in flags.given() if f != "--engine"] + own
    if len(flags.resume) != 1 or given:
        raise TuneError(f"--resume takes one tune folder and keeps the settings it began with; drop "
                        f"{', '.join(given) or 'the other folders'}")
    check_owner(flags.resume[0], "tune.json")  # its configurations are run as they are written
    plan = Tune.load(flags.resume[0])
    if ask.objective not in ("capacity", plan.objective):
        raise TuneError(f"--resume keeps the objective the tune began with ({plan.objective}); drop "
                        f"--objective {ask.objective}")
    return plan


def _fresh(flags: MeasureFlags, ask: TuneAsk) -> Tune:
    """A new tune: one engine's configurations checked, its folder made and tune.json written."""
    kinds = flags.engine or ["reference"]
    if len(kinds) != 1:
        raise TuneError(f"--engine {', '.join(kinds)}: a tune tries one engine's configurations; give one")
    if flags.engine_file or flags.through_ui or kinds == ["openwebui"]:
        raise TuneError("a tune tries the configurations of one engine given by --engine KIND; an "
                        "--engine-file, --through-ui or --engine openwebui would add engines of their own")
    if bool(ask.grid) == bool(ask.configs):
        raise TuneError("give --grid KEY=V1,V2 (repeatable) or --configs FILE: the configurations to try")
    tried = read_configs(ask.configs) if ask.configs else parse_grids(ask.grid or [])
    folder = flags.out / f"tune-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{kinds[0]}"
    make_private_dir(folder)
    plan = Tune(folder, kinds[0], check_objective(ask.objective), [TuneEntry(c) for c in with_default(tried)],
                settings_of(flags, ask.concurrency, ask.rate), ask.min_accuracy)
    plan.save()
    return plan


def measure_config(plan: Tune, entry: TuneEntry, flags: MeasureFlags, levels: LoadOverrides,
                   watch: TuneWatcher) -> bool:
    """One configuration's sweep (resumed if it was interrupted), its report, and its state in tune.json.
    Ctrl-C saves it as interrupted and goes on up."""
    watch.configuration(entry.config.name)
    before = set(plan.folder.iterdir())
    try:
        if entry.run_dir and entry.status == "interrupted":
            jobs, finished = measure.resumed_jobs(MeasureFlags(resume=[plan.folder / entry.run_dir], out=plan.folder),
                                                  "sweep", [], watch.say)
            if finished:  # it ended before tune.json heard of it
                entry.status = "complete"
                plan.save()
                _report(entry.config.name, plan.folder / entry.run_dir, watch)
                return True
        else:
            entry.run_dir = None  # a configuration run afresh: an earlier failed run is not its figures
            jobs = measure.fresh_jobs(_config_flags(flags, plan, entry.config.args), levels, say=watch.say)
        if len(jobs) != 1:
            raise RuntimeError(f"a tune configuration is one job, not {len(jobs)}")
        outcome = measure.run_jobs(jobs, watch)
    except KeyboardInterrupt:
        entry.run_dir = entry.run_dir or _new_run_dir(plan.folder, before)
        entry.status = "interrupted"
        plan.save()
        raise
    except Exception as exc:  # a bad flag or engine argument: this configuration fails, the others go on
        entry.status = f"failed: {exc}"
        plan.save()
        watch.failed(entry.config.name, str(exc))
        return False
    return _measured(plan, entry, outcome, before, watch)


def _measured(plan: Tune, entry: TuneEntry, outcome: measure.Outcome, before: set[Path], watch: TuneWatcher) -> bool:
    """A configuration's sweep ended: its run directory and state saved, its report written."""
    result = outcome.results[0] if outcome.results else None
    entry.run_dir = result.run_dir.name if result else entry.run_dir or _new_run_dir(plan.folder, before)
    if outcome.failures:
        entry.status = f"failed: {outcome.failures[0][1]}"
    else:
        entry.status = "complete" if result and result.status == "complete" else f"failed: {result and result.status}"
    plan.save()
    if result is not None:
        _report(entry.config.name, result.run_dir, watch)
    if outcome.failures:
        watch.failed(entry.config.name, outcome.failures[0][1])
    return entry.status == "complete"


def _report(name: str, run_dir: Path, watch: TuneWatcher) -> None:
    """The configuration's run report, which the tune reads its figures from."""
    from bench.flows.report import render_run_report

    try:
        render_run_report(run_dir)
    except Exception as exc:  # the measurements are kept; the tune says the figures are missing
        watch.warn(f"{name}: no report ({exc})")


def _config_flags(flags: MeasureFlags, plan: Tune, args: dict[str, str]) -> MeasureFlags:
    """The tune's flags with this configuration's engine arguments (`model` is the model flag)."""
    engine_args = [*(flags.engine_arg or []), *(f"{k}={v}" for k, v in args.items() if k != "model")]
    return dataclasses.replace(flags, engine=[plan.engine], engine_arg=engine_args,
                               model=args.get("model", flags.model), out=plan.folder, report=False)


def _new_run_dir(folder: Path, before: set[Path]) -> str | None:
    made = sorted(p for p in set(folder.iterdir()) - before if p.is_dir() and not p.name.startswith("."))
    return made[-1].name if made else None


def _finish(plan: Tune) -> TuneOutcome:
    """The tune report (table, chart, the best's decision) from every configuration measured so far."""
    from reports.tune_report import write_tune_report

    results = [config_result(plan.folder, e) for e in plan.entries]
    chosen = best(results, plan.objective, plan.min_accuracy)
    default = next((r for r in results if r.name == "default"), None)
    front = pareto_front([(r.name, x, y) for r in results for x, y in r.curve])
    num_tried = sum(r.run_dir is not None for r in results)
    data = {"engine": plan.engine, "objective": plan.objective, "folder": str(plan.folder),
            "configs": [{**dataclasses.asdict(r), "accuracy_note": accuracy_note(r, default, plan.min_accuracy)}
                        for r in results], "best": chosen.name if chosen else None, "min_accuracy": plan.min_accuracy,
            "num_tried": num_tried,
            "pareto_front": [{"config": name, "tokens_per_s_per_user": x, "tokens_per_s_per_gpu": y}
                             for name, x, y in front], "verdict": _verdict(plan.folder, chosen),
            "hardware_note": hardware_note(results), "nodes": any(r.node for r in results)}
    report = write_tune_report(data, plan.folder / "tune.html")
    decision = None
    if chosen is not None and chosen.run_dir is not None:
        decision = _decision_report(plan, chosen, chosen.run_dir, num_tried, default)
    return TuneOutcome(plan, tuple(results), chosen, default, num_tried, report, decision,
                       hardware_note=data["hardware_note"])


def _decision_report(plan: Tune, chosen: ConfigResult, run_dir: str, num_tried: int,
                     default: ConfigResult | None) -> Path | str:
    """The decision report of the best configuration (its run in `run_dir`), in the tune folder, saying how it
    was chosen."""
    from bench.flows.report import render_report

    mine = objective_figure(chosen, plan.objective)
    theirs = objective_figure(default, plan.objective) if default is not None else None
    against = f"; its {plan.objective} is x{mine / theirs:.2f} the default's" if mine and theirs else ""
    note = (f"measured with the configuration bench tune chose: {chosen.name}, the best by {plan.objective} of "
            f"{num_tried} tried{against} (see tune.html)")
    try:
        return render_report([plan.folder / run_dir], plan.folder / "report.html", notes=[note]).files.html
    except Exception as exc:  # the tune's own report stands without it
        return f"not written ({exc})"


def _verdict(folder: Path, chosen: ConfigResult | None) -> dict[str, Any] | None:
    """The decision of the best configuration's own report."""
    if chosen is None or chosen.run_dir is None:
        return None
    path = folder / chosen.run_dir / "report.json"
    return json.loads(path.read_text())["verdict"] if path.is_file() else None
