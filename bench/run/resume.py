"""Going on with an interrupted run (`--resume RUN_DIR`): what its directory holds is kept, only what is
missing runs.

Levels that finished (they have a line in levels.jsonl) keep their records as they are, byte for byte; the
records of a level that was cut short are dropped, and that level runs again. The run's own scenario,
engine, seeds and plan come from its run.json, and each request stream (the measured one and the warm-ups')
is advanced past every request any attempt sent, the cut level's included, finished or still in flight
when it stopped (whole conversations, for multi-turn workloads), so no prompt reaches the server twice.

A run resumed on hardware unlike the one that measured its levels so far (another CPU, other CPUs usable, other
GPUs) is not refused: a Ray cluster may go on with an interrupted engine on another node. The resume says so, and
run.json records which levels came before the move (`RunInfo.resumed_elsewhere`), for the report to say which
levels ran where.

Going on runs what run.json says: its engine's image, command, volumes, environment and Python. So a run
directory (or run.json) that another user owns is refused, and what will be launched is shown before it is
(`launch_preview`).
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.inputs.hardware import describe_host
from bench.inputs.scenario import LoadSettings
from bench.run import rundir
from bench.run.runinfo import HostRecord, RunInfo
from engines.engine_file import EngineFile
from loadgen.arrivals import parse_label
from loadgen.columns import ColumnsBuilder
from loadgen.types import LevelSummary, RequestSpec

if TYPE_CHECKING:
    from engines.process import LocalKind


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
    hardware: HostRecord | None = None  # this machine, where it is unlike the one that measured the latest levels

    @property
    def moved(self) -> str | None:
        """Where the run goes on from other hardware: `from X to Y`, each as `HostRecord.kind` says it."""
        before = self.run.latest_hardware
        if self.hardware is None or before is None:
            return None
        return f"from {before.kind} to {self.hardware.kind}"

    @property
    def done_labels(self) -> set[str]:
        return {label for label, _ in self.finished}


def open_run(run_dir: Path, command: str) -> RunInfo:
    """The run.json of a run `command` ("sweep" or "capacity") can go on with."""
    if not run_dir.is_dir():
        raise ResumeError(f"--resume {run_dir}: no such directory")
    check_owner(run_dir)
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


def check_owner(folder: Path, record: str = rundir.RUN_FILE) -> None:
    """Refuse a folder to go on with (a run directory; a tune's), or its record (run.json; tune.json), that another
    user owns: going on would run their engine, image, command and Python as you. Taking it over is copying it
    (the copy is yours, and yours to read first)."""
    if not hasattr(os, "getuid"):  # no owners to compare (Windows)
        return
    me = os.getuid()
    for path in (folder, folder / record):
        if not path.exists():
            continue
        owner = path.stat().st_uid
        if owner != me:
            raise ResumeError(
                f"--resume {folder}: {path} belongs to {_user(owner)}, not to you ({_user(me)}); resuming runs the "
                f"engine, image, command and Python its {record} names. To take it over, copy it "
                f"(cp -r {shlex.quote(str(folder))} {shlex.quote(str(folder.parent / 'mine'))}), read its {record}, "
                "and --resume the copy")


def _user(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def launch_preview(spec: EngineFile) -> list[str]:
    """What going on with a run launches, as its run.json says, in lines to show before anything starts: a local
    engine's command line (port 0 stands for the one chosen at launch), a container's image and command, the
    mounts, the environment's names (never their values, which may be secrets), the adapters' folders, Open
    WebUI's Python."""
    from engines.process import engine_arg_flags, parse_engine_args
    from engines.registry import ENGINES, LocalProcess, is_container_kind

    args = parse_engine_args(spec.engine_args())
    entry = ENGINES.get(spec.engine)
    lines = [f"engine {spec.engine}" + (f" ({spec.name})" if spec.name else "") + f", model {spec.model or 'default'}"
             + (f", {spec.replicas} replicas behind vllm-router" if spec.replicas > 1 else "")]
    if spec.engine == "endpoint":
        lines.append(f"nothing launched: the endpoint {spec.base_url} is measured")
    elif isinstance(entry, LocalProcess):
        lines.append("command: " + _local_command(entry.kind, spec, args))
    elif is_container_kind(spec.engine):
        lines.append(f"image: {spec.image or f'the default image of {spec.engine}'}")
        command = spec.command if spec.engine == "container" else [f"<{spec.engine}'s server>", *engine_arg_flags(args)]
        lines.append("command: " + shlex.join(command or []))
        lines += [f"mount: {host} -> {target}" for host, target in spec.volumes.items()]
    else:
        lines.append(f"command: {spec.engine} " + shlex.join(engine_arg_flags(args)))
    if spec.env:
        lines.append(f"environment: {', '.join(sorted(spec.env))}")
    lines += [f"LoRA adapter {name}: {path}" for name, path in spec.lora.items()]
    if spec.ui:
        lines.append(f"Open WebUI in front: {spec.ui_python or '$BENCH_OPENWEBUI'}")
    return lines


def _local_command(kind: LocalKind, spec: EngineFile, args: dict[str, str]) -> str:
    """A local engine's command line as its kind builds it (the kind chooses the interpreter or binary)."""
    from engines.launch import EngineStartError

    try:
        engine = kind(spec.model or "default", dict(args), 0)
    except EngineStartError as exc:
        return f"can't be built here ({exc})"
    return shlex.join(engine.command)


@dataclass(frozen=True)
class Sent:
    """What a resumed run needs to know of one record any attempt wrote (kept or dropped)."""

    level: str
    request_id: int
    is_warmup: bool
    send_s: float
    end_s: float | None
    session_id: str | None


class _KeptLevels:
    """requests.jsonl's rows as they are read, once: each one's `Sent`, and the finished levels' measured ones as
    columns (their summaries, made as `read_run` makes them)."""

    def __init__(self, finished: set[str]) -> None:
        self.finished = finished
        self.records: list[Sent] = []
        self.columns: dict[str, ColumnsBuilder] = {}

    def __call__(self, row: dict[str, Any]) -> None:
        level = str(row["level"])
        self.records.append(Sent(level, row["request_id"], bool(row.get("is_warmup")), row["send_s"], row.get("end_s"),
                                 row.get("session_id")))
        if level in self.finished and not row.get("is_warmup"):
            builder = self.columns.get(level) or self.columns.setdefault(level, ColumnsBuilder(row["engine"], level))
            builder.add(row.get)


def prepare(run_dir: Path, run: RunInfo) -> Resume:
    """Drop the records of levels that did not finish, and say where the request streams stand: past every
    request any attempt sent, those of a level cut short included (its records, and as many more as it could
    have had in flight when it stopped, which left no record). requests.jsonl is read once."""
    level_runs = rundir.read_level_runs(run_dir)
    seen = _KeptLevels(set(level_runs))
    discarded = rundir.keep_only_levels(run_dir, set(level_runs), seen)
    records = seen.records
    finished_labels = tuple(level_runs)
    summaries = {level: rundir.level_summary(builder.build(), level_runs[level], run.slo)
                 for level, builder in seen.columns.items()}
    cut = set(discarded)
    in_flight = sum(_most_in_flight(label, [r for r in records if r.level == label], run) for label in cut)
    last = max((r for r in records if not r.is_warmup), key=lambda r: r.request_id, default=None)
    last_warmup = max((r.request_id for r in records if r.is_warmup), default=None)
    warmups = sum(_num_warmup(label, run) for label in cut)
    sessions = len({r.session_id for r in records if r.session_id is not None})
    return Resume(run_dir, run, tuple((label, summaries.get(label)) for label in finished_labels),
                  tuple(discarded), _past(last.request_id if last else None, in_flight),
                  _past(last_warmup, warmups), sessions + (in_flight if sessions else 0), _if_elsewhere(run))


def _if_elsewhere(run: RunInfo) -> HostRecord | None:
    """This machine, where its hardware is unlike the one that measured the run's latest levels (a machine the run
    does not describe is not compared)."""
    here, before = HostRecord.from_json(describe_host()), run.latest_hardware
    return here if before is not None and here.kind != before.kind else None


def _past(last_id: int | None, unrecorded: int) -> int | None:
    if last_id is None and unrecorded == 0:
        return None
    return (last_id if last_id is not None else -1) + unrecorded


def _most_in_flight(label: str, records: list[Sent], run: RunInfo) -> int:
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


