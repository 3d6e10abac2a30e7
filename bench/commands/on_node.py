"""The process that measures one job on a cluster's node (started by `bench.flows.node_run.NodeRun`, never by
hand):

    python -m bench.commands.on_node STAGING PARENT_PID

STAGING holds spec.json and, for an interrupted job, its run directory. spec.json's `job` says which:
- `tune` (bench.flows.tune_cluster): one configuration, measured as `bench tune` measures each one, with the
  tune's settings, its state kept in STAGING/tune.json as well;
- `sweep` (bench.flows.sweep_cluster): engine number `index` of the `count` that the sweep's settings give,
  measured as `bench sweep` measures it (no report: the driver writes them all).
Its state at the end goes to STAGING/status.json; what it says goes to stdout, line by line. It dies with
PARENT_PID (the node's end of the driver): the kernel's tie, and a thread that stops the sweep (and so its
engine) when the parent is gone.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from bench.commands import stopping
from bench.flows import measure
from bench.flows.measure import Job
from bench.flows.node_run import SPEC_FILE, STATUS_FILE
from bench.flows.sweep import SweepProgress
from bench.flows.sweep_cluster import sweep_settings_back
from bench.flows.tune import measure_config
from bench.flows.tune_plan import Tune, TuneConfig, TuneEntry
from bench.inputs.measure_options import MeasureFlags
from bench.inputs.measure_settings import settings_back
from bench.inputs.options import LoadOverrides
from common.processes import tie_to_parent
from loadgen.arrivals import Level
from loadgen.runner import LevelBounds
from loadgen.types import LevelSummary, RequestRecord

PARENT_POLL_S = 0.5


class _LevelLines:
    """A sweep's progress as a line when each level starts and ends."""

    def level_started(self, level: Level, bounds: LevelBounds) -> None:
        print(f"level {level.label} started", flush=True)

    def request_finished(self, record: RequestRecord) -> None:
        pass

    def level_finished(self, summary: LevelSummary | None) -> None:
        if summary is not None:
            print(f"level {summary.level} ended: {summary.requests.num_ok} requests, "
                  f"{summary.throughput.output_tokens_per_s:.1f} output tokens/s", flush=True)


class _Lines:
    """A tune's and a sweep's watcher: everything said as plain lines on stdout, for the driver to relay."""

    def progress(self, job: Job) -> AbstractContextManager[SweepProgress | None]:
        return nullcontext(_LevelLines())

    def say(self, line: str) -> None:
        print(line, flush=True)

    def failed(self, engine: str, reason: str) -> None:
        print(f"{engine} failed: {reason}", flush=True)

    def configuration(self, name: str) -> None:
        print(f"measuring {name} on pid {os.getpid()}", flush=True)

    def warn(self, line: str) -> None:
        print(f"warning: {line}", flush=True)


def _stop_when_orphaned(parent: int) -> None:
    """SIGTERM to this process once `parent` is gone (stopping turns it into Ctrl-C), SIGKILL if that fails."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    staging_text, parent_text = argv or sys.argv[1:]
    tie_to_parent(int(parent_text))
    # A Ray worker blocks SIGINT in its threads, and a child inherits the mask: unblocked, or Ctrl-C on the driver
    # would not stop this sweep (nor, inherited further, its engine).
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    _stop_when_orphaned(int(parent_text))
    stopping.install()
    staging = Path(staging_text)
    spec = json.loads((staging / SPEC_FILE).read_text())
    status = "interrupted"
    try:
        status = JOBS[spec["job"]](staging, spec, _Lines())
    except KeyboardInterrupt:
        return stopping.exit_code()
    except Exception as exc:  # a flag this node reads otherwise (a file missing here): this job fails, said so
        status = f"failed: {type(exc).__name__}: {exc}"
        print(status, flush=True)
    finally:
        (staging / STATUS_FILE).write_text(json.dumps({"status": status}))
    return 0 if status == "complete" else 1


def _tune(staging: Path, spec: dict, lines: _Lines) -> str:
    """A tune's configuration, measured as on one machine; its state as tune.json keeps it."""
    entry = TuneEntry(TuneConfig(spec["config"]["name"], spec["config"]["args"]), spec.get("run_dir"),
                      spec.get("status", "pending"))
    plan = Tune(staging, spec["engine"], spec["objective"], [entry], spec["settings"], spec.get("min_accuracy"))
    plan.save()
    flags, concurrency, rate = settings_back(plan.settings)
    measure_config(plan, entry, flags, LoadOverrides(concurrency=concurrency, rate=rate), lines)
    return entry.status


def _sweep(staging: Path, spec: dict, lines: _Lines) -> str:
    """One engine of a sweep (or its interrupted run, gone on with), measured as on one machine."""
    if spec.get("run_dir"):
        jobs, complete = measure.resumed_jobs(MeasureFlags(resume=[staging / spec["run_dir"]], out=staging),
                                              "sweep", [], lines.say)
        if complete:
            return "complete"
    else:
        flags, levels = sweep_settings_back(spec["settings"], staging)
        jobs = measure.fresh_jobs(flags, levels, say=lines.say)
        names = [job.plan.engine_kind for job in jobs]
        if len(jobs) != spec["count"] or names[spec["index"]] != spec["engine"]:
            return (f"failed: the sweep's flags give the engines {', '.join(names)} on this node, and engine "
                    f"{spec['index'] + 1} of {spec['count']} is {spec['engine']} on the driver (are the files they "
                    "name the same here?)")
        jobs = [jobs[spec["index"]]]
    outcome = measure.run_jobs(jobs, lines)
    if outcome.failures:
        return f"failed: {outcome.failures[0][1]}"
    return outcome.results[0].status


# What spec.json's `job` may ask for; anything else fails the job, named.
JOBS = {"tune": _tune, "sweep": _sweep}


if __name__ == "__main__":
    sys.exit(main())
