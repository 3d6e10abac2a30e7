"""Going on with an interrupted run (`--resume RUN_DIR`): what its directory holds is kept, only what is
missing runs.

Levels that finished (they have a line in levels.jsonl) keep their records as they are, byte for byte; the
records of a level that was cut short are dropped, and that level runs again. The run's own scenario,
engine, seeds and plan come from its run.json, and the request stream is advanced past every request the
kept levels sent (whole conversations, for multi-turn workloads), so no prompt is sent twice and the
levels still to come get the prompts a fresh run would have given them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import rundir
from bench.rundir import RunInfo
from loadgen.recorder import read_records
from loadgen.types import LevelSummary, RequestSpec


class ResumeError(ValueError):
    """A run that can't be resumed, or one resumed with flags it doesn't match; the message says what to do."""


@dataclass(frozen=True)
class Resume:
    run_dir: Path
    run: RunInfo
    finished: tuple[tuple[str, LevelSummary | None], ...]  # label, summary: in the order they ran
    discarded: tuple[str, ...]  # levels cut short, whose records were dropped
    last_request_id: int | None
    last_warmup_id: int | None
    last_conversation_id: int | None

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
    kind = (run.plan or {}).get("kind", "sweep")
    if kind != command:
        raise ResumeError(f"--resume {run_dir}: that run is a {kind}, not a {command}; resume it with "
                          f"`bench {kind} --resume {run_dir}`")
    if not run.engine_spec:
        raise ResumeError(f"--resume {run_dir}: its run.json does not record how its engine was launched "
                          "(written by an older version); start a new run")
    return run


def prepare(run_dir: Path, run: RunInfo) -> Resume:
    """Drop the records of levels that did not finish, and say where the request streams stand."""
    finished_labels = list(rundir.read_level_runs(run_dir))
    discarded = rundir.keep_only_levels(run_dir, set(finished_labels))
    summaries = {s.level: s for s in _summaries(run_dir)}
    path = run_dir / rundir.REQUESTS_FILE
    records = read_records(path) if path.is_file() else []
    last = max((r for r in records if not r.is_warmup), key=lambda r: r.request_id, default=None)
    last_warmup = max((r.request_id for r in records if r.is_warmup), default=None)
    return Resume(run_dir, run, tuple((label, summaries.get(label)) for label in finished_labels),
                  tuple(discarded), last.request_id if last else None, last_warmup,
                  last.conversation_id if last else None)


def skip_sent(specs: Iterator[RequestSpec], last_id: int | None, last_conversation: int | None = None
              ) -> Iterator[RequestSpec]:
    """The stream from the first request after `last_id` (and after the rest of its conversation)."""
    if last_id is None:
        yield from specs
        return
    for spec in specs:
        if spec.request_id <= last_id or (last_conversation is not None and spec.conversation_id == last_conversation):
            continue
        yield spec
        break
    yield from specs


def _summaries(run_dir: Path) -> list[LevelSummary]:
    try:
        return rundir.summarize_run(run_dir)
    except rundir.RunDirError:
        return []
