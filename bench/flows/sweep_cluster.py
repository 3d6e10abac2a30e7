"""A sweep's engines run side by side on a cluster (`bench sweep --engine A --engine B --cluster ADDRESS`): each
engine a `bench.flows.placed.Work` on a node of its own, engine and load together, its run directory shipped back
into the sweep's runs folder as its levels end.

Contract: `sweep_works(jobs, flags, levels)` makes a work of each job the flags give on this machine (every flag
checked here, before the cluster is joined); its node makes the same jobs of the same flags and runs number
`index` (bench.commands.on_node). `resume_works(flags, given, say)` makes a work of each `--resume` run directory
not yet complete (its files go with it, and its node goes on from its last shipped level) and names those already
complete. `run_works(works, placer, watch)` runs them side by side and returns the `Outcome` a sweep on one
machine returns: each run measured (as read from its shipped run directory) and each failure named; a lost node
is a failure whose run directory `--resume` completes. Ctrl-C raises `SweepInterrupted`, naming the run
directories, once every node has stopped and shipped what it measured.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.flows import measure
from bench.flows.measure import Job, JobWatcher, Outcome
from bench.flows.placed import Placer, Work, files_of, for_nodes, run_placed
from bench.flows.sweep import SweepResult
from bench.flows.tune_ranking import which_ran_on_what
from bench.inputs.measure_options import MeasureFlags
from bench.inputs.measure_settings import settings_back, settings_of
from bench.inputs.options import LoadOverrides
from bench.run.rundir import ENGINE_LOG, LEVELS_FILE, Run, RunDirError, read_run
from bench.run.runinfo import HostRecord

JOB = "sweep"  # what the node process is asked to run (bench.commands.on_node)


@dataclass
class SweepSlot:
    """An engine's state while it runs on its node."""

    run_dir: str | None = None
    status: str = "pending"
    node: str | None = None


def sweep_settings(flags: MeasureFlags, levels: LoadOverrides) -> dict[str, Any]:
    """The sweep's flags and levels in JSON, as a node gets them."""
    return {**settings_of(flags, levels.concurrency, levels.rate), "burstiness": levels.burstiness,
            "max_concurrency": levels.max_concurrency}


def sweep_settings_back(settings: dict[str, Any], out: Path) -> tuple[MeasureFlags, LoadOverrides]:
    """`sweep_settings`' JSON back into flags (runs written to `out`) and levels."""
    flags, concurrency, rate = settings_back(settings)
    return (dataclasses.replace(flags, out=out),
            LoadOverrides(concurrency, rate, settings.get("burstiness"), settings.get("max_concurrency")))


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C, once every node has stopped: `run_dirs` are the run directories --resume goes on with, and
    `not_started` the engines still waiting for room (they left nothing to go on with)."""

    def __init__(self, run_dirs: list[Path], not_started: list[str]) -> None:
        super().__init__()
        self.run_dirs, self.not_started = run_dirs, not_started


def sweep_works(jobs: list[Job], flags: MeasureFlags, levels: LoadOverrides) -> list[Work]:
    """A work of each of a fresh sweep's jobs, each to be measured on a node of its own."""
    settings = for_nodes(sweep_settings(flags, levels))
    return [Work(job.plan.engine_kind, SweepSlot(), flags.out,
                 {"job": JOB, "settings": settings, "index": index, "count": len(jobs), "engine": job.plan.engine_kind})
            for index, job in enumerate(jobs)]


def resume_works(flags: MeasureFlags, given: list[str], say: Callable[[str], None]) -> tuple[list[Work], list[Path]]:
    """A work of each `--resume` run directory not yet complete; those already complete apart. Each is checked
    here as on one machine (a flag that would change it, a secret run.json does not keep, a dataset changed since:
    ResumeError), its files left as they are: its node sees where its levels stand."""
    checked, complete = measure.resumable(flags, JOB, given, say)
    works = [Work(job.plan.engine_kind, SweepSlot(run_dir.name, "interrupted"), run_dir.parent,
                  {"job": JOB, "run_dir": run_dir.name, "engine": job.plan.engine_kind}, files_of(run_dir))
             for run_dir, _, job in checked]
    return works, complete


def run_works(works: list[Work], placer: Placer, watch: JobWatcher) -> Outcome:
    """The works placed and followed to their end; what they measured, as a sweep here would have it."""
    try:
        run_placed(works, placer, lambda: None, watch.say, watch.failed, "bench sweep --resume")
    except KeyboardInterrupt:
        raise SweepInterrupted([work.folder / work.slot.run_dir for work in works
                                if work.slot.run_dir and work.slot.status != "complete"],
                               [work.name for work in works if work.slot.status == "pending"]) from None
    results, failures, measured = [], [], []
    for work in works:
        slot = work.slot
        _drop_if_never_started(work)
        run = _read(work.folder / slot.run_dir) if slot.run_dir else None
        if slot.status == "complete" and run is not None:
            results.append(SweepResult(work.folder / slot.run_dir, run, slot.status))
            measured.append((work.name, slot.node, run.info.hardware))
        else:
            resume = f" (go on with --resume {work.folder / slot.run_dir})" if slot.run_dir else ""
            failures.append((work.name, slot.status.removeprefix("failed: ") + resume))
    if (note := hardware_note(measured)) is not None:
        watch.say(f"warning: {note}")
    return Outcome(tuple(results), tuple(failures))


def hardware_note(measured: list[tuple[str, str | None, HostRecord | None]]) -> str | None:
    """A warning when the engines (name, node, the host its run.json describes) were measured on different
    hardware: their figures then differ by the machine as well as by the engine."""
    mixed = which_ran_on_what([(f"{name} ({node})" if node else name, host.kind if host else None)
                               for name, node, host in measured])
    if mixed is None:
        return None
    return f"the engines were measured on different hardware, so compare them with care: {mixed}"


def _drop_if_never_started(work: Work) -> None:
    """A fresh engine that failed before it started, and left no log: its run directory removed, as on one machine
    (its node removed its own copy)."""
    slot = work.slot
    if work.spec.get("run_dir") or not slot.run_dir or not slot.status.startswith("failed"):
        return
    run_dir = work.folder / slot.run_dir
    if not (run_dir / ENGINE_LOG).exists() and not (run_dir / LEVELS_FILE).exists():
        shutil.rmtree(run_dir, ignore_errors=True)
        slot.run_dir = None


def _read(run_dir: Path) -> Run | None:
    try:
        return read_run(run_dir)
    except RunDirError:
        return None
