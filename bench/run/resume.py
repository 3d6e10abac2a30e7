"""Going on with an interrupted run (`--resume RUN_DIR`): what its directory holds is kept, only what is
missing runs.

Levels that finished (they have a line in levels.jsonl) keep their records as they are, byte for byte; the
records of a level that was cut short are dropped, and that level runs again. The run's own scenario,
engine, seeds and plan come from its run.json, and each request stream (the measured one and the warm-ups')
is advanced past every request any attempt sent, the cut level's included, finished or still in flight
when it stopped (whole conversations, for multi-turn workloads), so no prompt reaches the server twice.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.inputs.scenario import LoadSettings
from bench.run import rundir
from bench.run.runinfo import RunInfo
from loadgen.arrivals import parse_label
from loadgen.recorder import read_records
from loadgen.types import LevelSummary, RequestRecord, RequestSpec


class ResumeError(ValueError):
    """A run that can't be resumed, or one resumed with flags it doesn't match; the message says what to do."""


@dataclass(frozen=True)
class Resume:
    run_dir: Path
    run: RunInfo
    finished: tuple[tuple[str, LevelSummary | None], ...]  # label, summary: in the order they ran
    discarded: tuple[str, ...]  # levels cut short, whose records were dropped
    last_request_id: int | None  # the stream goes on after it (and after the rest of its conversation)
    last_warmup_id: int | None
    num_sessions_started: int = 0  # agent sessions: those any attempt started (a cut level's users included)

    @property
    def done_labels(self) -> set[str]:
        return {label for label, _ in self.finished}


def open_run(run_dir: Path, command: str) -> RunInfo:
    """The run.json of a run `command` ("sweep" or "capacity") can go on with."""
    if not run_dir.is_dir():
        raise ResumeError(f"--resume {run_dir}: no such directory")
    try:
        run = rundir.read_run_info(run_dir)
    except rundir.RunDirError:
        raise ResumeError(f"--resume {run_dir}: not a run directory (it has no run.json)") from None
    kind = run.plan.kind
    if kind != command:
        raise ResumeError(f"--resume {run_dir}: that run is a {kind}, not a {command}; resume it with "
                          f"`bench {kind} --resume {run_dir}`")
    if run.engine_spec is None or run.scenario is None:
        raise ResumeError(f"--resume {run_dir}: its run.json does not record how its engine was launched and what "
                          f"it measured in a form this version reads ({', '.join(run.unread) or 'engine_spec'}); "
                          "start a new run")
    return run


def prepare(run_dir: Path, run: RunInfo) -> Resume:
    """Drop the records of levels that did not finish, and say where the request streams stand: past every
    request any attempt sent, those of a level cut short included (its records, and as many more as it could
    have had in flight when it stopped, which left no record)."""
    path = run_dir / rundir.REQUESTS_FILE
    records = read_records(path) if path.is_file() else []  # before the cut levels' records are dropped
    discarded = rundir.keep_only_levels(run_dir, set(rundir.read_level_runs(run_dir)))
    kept = rundir.read_run(run_dir)
    finished_labels = kept.finished
    summaries = {s.level: s for s in kept.summaries}
    cut = set(discarded)
    in_flight = sum(_most_in_flight(label, [r for r in records if r.level == label], run) for label in cut)
    last = max((r for r in records if not r.is_warmup), key=lambda r: r.request_id, default=None)
    last_warmup = max((r.request_id for r in records if r.is_warmup), default=None)
    warmups = sum(_num_warmup(label, run) for label in cut)
    sessions = len({r.session_id for r in records if r.session_id is not None})
    return Resume(run_dir, run, tuple((label, summaries.get(label)) for label in finished_labels),
                  tuple(discarded), _past(last.request_id if last else None, in_flight),
                  _past(last_warmup, warmups), sessions + (in_flight if sessions else 0))


def _past(last_id: int | None, unrecorded: int) -> int | None:
    if last_id is None and unrecorded == 0:
        return None
    return (last_id if last_id is not None else -1) + unrecorded


def _most_in_flight(label: str, records: list[RequestRecord], run: RunInfo) -> int:
    """How many of a cut level's requests may have been sent and never recorded: its users (closed loop), its
    cap on requests in flight, or its rate times the longest request it recorded (the request timeout when it
    recorded none)."""
    level = parse_label(label)
    load = run.scenario.load if run.scenario else LoadSettings()
    if level.kind == "concurrency":
        return int(level.target)
    if load.max_concurrency:
        return load.max_concurrency
    longest_s = max((r.end_s - r.send_s for r in records if r.end_s is not None), default=None)
    rate = level.target if level.kind == "rate" else 1.0
    return math.ceil(rate * (longest_s if longest_s is not None else load.request_timeout_s)) + 1


def _num_warmup(label: str, run: RunInfo) -> int:
    """The warm-up requests a level sends first (as the runner counts them)."""
    load = run.scenario.load if run.scenario else LoadSettings()
    if load.warmup_requests is not None:
        return load.warmup_requests
    level = parse_label(label)
    return int(level.target) if level.kind == "concurrency" else load.max_concurrency or 8


def skip_sent(specs: Iterator[RequestSpec], last_id: int | None) -> Iterator[RequestSpec]:
    """The stream from the first request after `last_id` and after the rest of that request's conversation."""
    if last_id is None:
        yield from specs
        return
    conversation = None
    for spec in specs:
        if spec.request_id <= last_id:
            conversation = spec.conversation_id
            continue
        if conversation is not None and spec.conversation_id == conversation:
            continue
        yield spec
        break
    yield from specs


