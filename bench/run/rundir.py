"""The run directory: the contract between a sweep and everything that reads it afterwards.

    runs/<utc-time>-<engine>-<scenario>/
        run.json         RunInfo: tool version, engine, hardware, resolved scenario, levels, seeds, status, and
                         a replayed dataset's path, sha256 and lengths (never its text)
        requests.jsonl   one RequestRecord per line, appended as each request ends
        levels.jsonl     one line per finished level: timing and the client's check on itself (split across
                         client workers: each worker's check, clock offset and start-up)
        summary.csv      one LevelSummary per level (also summary.json); rebuilt by `bench summarize`
        repeats.json     with --repeats: each level's headline figures as mean, 95 % interval and values
        capacity.json    a capacity search's answer and every probe (bench.run.capacity_record)
        quality.json     `bench quality`: the eval's accuracy by grader and category, the comparison with the
                         baseline (bench.flows.quality)
        telemetry.jsonl  the server's /metrics sampled every second, when it publishes them
        engine.log       the engine's output, when the toolkit launched it
        workers.log      local client workers' own output (--workers), when there was any

Everything in a report can be recomputed from these files alone.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import orjson

from bench.run.capacity_record import CapacityRecord, read_capacity
from bench.run.enginelog import NO_LOG, EngineLogFacts, read_engine_log
from bench.run.runinfo import RunInfo
from common.names import UnsafeNameError, inside, slug
from common.private import make_private_dir
from common.secrets import redact
from costmodel.precision import normalized
from loadgen.columns import LevelColumns, columns_by_level
from loadgen.metrics import cut_short, summarize, summarize_columns
from loadgen.network import ConnectProbe
from loadgen.recorder import read_jsonl
from loadgen.repeats import aggregate
from loadgen.sessions.figures import pick_lane
from loadgen.telemetry import gpu_view, server_view, summed_view
from loadgen.types import (
    SLO,
    ClientCheck,
    GpuView,
    LevelSummary,
    MachineLoad,
    RepeatedLevel,
    ServerView,
    SessionLane,
    WorkerRun,
)

RUN_FILE = "run.json"
REQUESTS_FILE = "requests.jsonl"
QUALITY_FILE = "quality.json"  # `bench quality`: the eval's scores and the comparison with its baseline
LEVELS_FILE = "levels.jsonl"
WORKERS_LOG = "workers.log"  # client workers' own output (--workers), if any
SUMMARY_CSV = "summary.csv"
SUMMARY_JSON = "summary.json"
REPEATS_FILE = "repeats.json"
ENGINE_LOG = "engine.log"
TELEMETRY_FILE = "telemetry.jsonl"
REPLICA_TELEMETRY = "telemetry.replica-{index}.jsonl"  # behind a router: each replica's own /metrics


View = TypeVar("View", ServerView, GpuView)


class RunDirError(Exception):
    """Not a run directory, or one that holds nothing yet; the message names the directory."""


def new_run_dir(root: Path, engine: str, scenario: str, now: datetime | None = None) -> Path:
    """A new folder in `root` named by the time, the engine and the scenario. The names may come from a file
    (an imported tool's backend): each is reduced to a slug, so the folder is always one level inside `root`."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    base = inside(root, f"{stamp}-{slug(engine)}-{slug(scenario)}", "run directory")
    path, suffix = base, 1
    while path.exists():
        suffix += 1
        path = base.with_name(f"{base.name}-{suffix}")
    return make_private_dir(path)


def write_run_info(run_dir: Path, run: RunInfo) -> None:
    """Written whole to a temporary file, then renamed: a reader never sees half a run.json."""
    tmp = run_dir / (RUN_FILE + ".tmp")
    tmp.write_text(json.dumps(redact(run.to_json()), indent=2, default=str) + "\n")
    tmp.replace(run_dir / RUN_FILE)


def read_run_info(run_dir: Path) -> RunInfo:
    path = run_dir / RUN_FILE
    if not path.is_file():
        raise RunDirError(f"{run_dir}: no {RUN_FILE}; is this a run directory?")
    return RunInfo.from_json(redact(json.loads(path.read_text())))  # a run.json written before secrets were kept out


def read_level_runs(run_dir: Path) -> dict[str, dict[str, Any]]:
    path = run_dir / LEVELS_FILE
    return {row["level"]: row for row in read_jsonl(path)} if path.is_file() else {}


GGUF_TYPE = re.compile(r"[._-](BF16|F16|F32|Q\d_[0-9A-Z_]+|IQ\d_[0-9A-Z_]+)\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class Run:
    """A run directory read once: what ran (run.json), each level's summary recomputed from its records (in
    the order the levels ran), what the server, its GPUs and each replica behind a router saw during each
    level, a capacity search's answer (capacity.json), the UI's page as a browser saw it, the eval's scores
    (quality.json), what engine.log states, and each level's agent session a report draws: all a report needs,
    so nothing after `read_run` opens a file of the run."""

    run_dir: Path
    info: RunInfo
    summaries: tuple[LevelSummary, ...]
    finished: tuple[str, ...]  # the levels that ended (a line in levels.jsonl), in order
    server_views: tuple[ServerView, ...] = ()
    gpu_views: tuple[GpuView, ...] = ()
    replica_views: tuple[tuple[int, ServerView], ...] = ()  # (replica index, its view of a level)
    capacity: CapacityRecord | None = None  # capacity.json: the answer, its repeats, every probe
    ui_screenshot: bytes | None = None
    quality: dict[str, Any] | None = None  # quality.json as written (`bench quality`)
    engine_log: EngineLogFacts = NO_LOG  # what engine.log states (the engine's KV capacity)
    session_lanes: tuple[SessionLane, ...] = ()  # agent sessions: each level's session a report draws

    @property
    def repeated(self) -> tuple[RepeatedLevel, ...]:
        """The levels measured more than once, folded with their intervals."""
        return tuple(r for r in aggregate(list(self.summaries)) if r.num_repeats > 1)

    @property
    def missing(self) -> tuple[str, ...]:
        """Levels planned but never measured."""
        measured = {s.level for s in self.summaries}
        return tuple(label for label in self.info.levels if label not in measured)

    @property
    def cut_short(self) -> tuple[str, ...]:
        """Levels measured but not finished."""
        return tuple(s.level for s in self.summaries if s.level not in self.finished)

    @property
    def precision(self) -> str | None:
        """The precision the run's weights were served in: a quantization the engine was told, else the weights'
        dtype, else what a GGUF file's name says (`...Q4_1.gguf`: its weights stay so), else the compute dtype;
        None where nothing states it (`auto`)."""
        spec, engine = self.info.engine_spec, self.info.engine
        args = spec.args if spec else {}
        files = [spec.model if spec else None, engine.details.model_argument, engine.model]
        gguf = next((m.group(1) for f in files if f and (m := GGUF_TYPE.search(f))), None)
        for value in (spec.quantization if spec else None, args.get("quantization"), args.get("weights-dtype"),
                      args.get("weights_dtype"), gguf, args.get("dtype")):
            if value is not None and normalized(str(value)) is not None:
                return normalized(str(value))
        return None


def read_run(run_dir: Path, slo: SLO | None = None) -> Run:
    """Everything `run_dir` holds, each file read once; levels judged by `slo` (default: the run's own).
    Raises RunDirError when it is not a run directory."""
    info = read_run_info(run_dir)
    level_runs = read_level_runs(run_dir)
    spans = _spans(level_runs)
    samples = _samples(run_dir / TELEMETRY_FILE)
    ui = info.engine.details.ui
    screenshot = _kept_file(run_dir, ui.page.screenshot) if ui and ui.page and ui.page.screenshot else None
    replicas = _replica_views(run_dir, spans)
    lanes: list[SessionLane] = []
    return Run(
        run_dir=run_dir, info=info, summaries=tuple(_summaries(run_dir, level_runs, slo or info.slo, info, lanes)),
        finished=tuple(level_runs) if info.imported is None else tuple(info.levels),  # an import: every level ended
        # Behind a router the server is its replicas: their views summed (the router's own port serves no
        # engine series, or one replica's).
        server_views=tuple(_summed(replicas, spans) if replicas else
                           _sampled(server_view(level, samples, *span) for level, span in spans.items())),
        gpu_views=tuple(_sampled(gpu_view(level, samples, *span) for level, span in spans.items())),
        replica_views=tuple(replicas),
        capacity=read_capacity(run_dir),
        ui_screenshot=screenshot.read_bytes() if screenshot is not None and screenshot.is_file() else None,
        quality=read_quality(run_dir), engine_log=read_engine_log(run_dir / ENGINE_LOG), session_lanes=tuple(lanes),
    )


def _kept_file(run_dir: Path, name: str) -> Path | None:
    """A file run.json names, when it is a plain file name inside the run directory (None: it is not)."""
    try:
        return inside(run_dir, name, str(run_dir / RUN_FILE))
    except UnsafeNameError:
        return None


def summarize_run(run_dir: Path, slo: SLO | None = None) -> list[LevelSummary]:
    """Every level's summary recomputed from the records on disk, in the order the levels ran (what a sweep
    rewrites after each level; `read_run` for all the rest)."""
    info = read_run_info(run_dir)
    return _summaries(run_dir, read_level_runs(run_dir), slo or info.slo, info)


IMPORTED_FOLDER = "imported"  # an imported run's source files, read again each time the run is read


def _summaries(run_dir: Path, level_runs: dict[str, dict[str, Any]], slo: SLO, info: RunInfo,
               lanes: list[SessionLane] | None = None) -> list[LevelSummary]:
    """Each level's summary; with `lanes`, each level's session to draw added to it, from the same one read."""
    if info.imported is not None:
        return imported_summaries(run_dir, info, slo)
    records_path = run_dir / REQUESTS_FILE
    if not records_path.is_file():
        return []
    calls: dict[str, list[dict[str, Any]]] = {}
    rows = read_jsonl(records_path) if lanes is None else _noting_calls(read_jsonl(records_path), calls)
    # Read as columns, a row at a time: memory grows by a few bytes per token, not by a record object.
    summaries = [level_summary(columns, level_runs.get(level, {}), slo)
                 for level, columns in columns_by_level(rows).items()]
    if lanes is not None:
        lanes += [lane for level, rows_of in calls.items() if (lane := pick_lane(rows_of, level)) is not None]
    return summaries


LANE_KEYS = ("level", "session_id", "session_requests", "ok", "agent", "step", "send_s", "end_s")


def _noting_calls(rows: Iterable[dict[str, Any]], calls: dict[str, list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """The rows passed on; each agent session's measured call kept on the way, by level, in brief: what a swim
    lane draws (`pick_lane`), its first chunk's time of all its chunks."""
    for row in rows:
        if row.get("session_id") and not row.get("is_warmup"):
            brief = {key: row.get(key) for key in LANE_KEYS}
            brief["chunk_times_s"] = (row.get("chunk_times_s") or [])[:1]
            calls.setdefault(row["level"], []).append(brief)
        yield row


def level_summary(columns: LevelColumns, row: dict[str, Any], slo: SLO) -> LevelSummary:
    """One level's summary from its measured records and its line in levels.jsonl (`row`, as read back; empty:
    the level never finished, and is cut short)."""
    client, network, machine = row.get("client"), row.get("network"), row.get("machine")
    workers = [WorkerRun.from_json(w) for w in row.get("workers") or []]
    ran = (row["wall_s"], row.get("duration_s")) if "wall_s" in row else None
    summary = summarize_columns(columns, slo, ClientCheck(**client) if client else None,
                                ConnectProbe(**network) if network else None, workers,
                                MachineLoad.from_json(machine) if machine else None, ran)
    return summary if row else cut_short(summary, columns)


def imported_summaries(run_dir: Path, info: RunInfo, slo: SLO) -> list[LevelSummary]:
    """An imported run's levels, read again from its source files (`bench import`): summarized as measured
    ones where the file holds each request, else the file's own figures, invalid where the SLO limits a
    latency whose p95 the file does not give."""
    from bench.imports import read_levels

    assert info.imported is not None
    summaries = []
    files = imported_files(run_dir, info)
    for level in read_levels(info.imported.tool, files, info.run_id, info.imported.engine):
        if level.records:
            summary = summarize(list(level.records), slo)
            summaries.append(replace(summary, notes=[*level.notes, *summary.notes]))
            continue
        assert level.summary is not None
        s = level.summary
        missing = [name for name, dist, limit in (("TTFT", s.latency.ttft_ms, slo.ttft_ms),
                                                  ("TPOT", s.latency.tpot_ms, slo.tpot_ms),
                                                  ("E2E", s.latency.e2e_ms, slo.e2e_ms))
                   if limit is not None and dist.p95 is None]
        if missing:
            s = replace(s, is_valid=False, invalid_reasons=[
                f"the file gives no p95 {', '.join(missing)} to check the SLO against"])
        summaries.append(s)
    return summaries


def imported_files(run_dir: Path, info: RunInfo) -> list[Path]:
    """An imported run's copies of its source files, each checked before it is read: its name in run.json must be
    a plain file name inside imported/ (a run directory may come from someone else), and its sha256 the one
    recorded when it was imported. Raises RunDirError naming the file."""
    assert info.imported is not None
    folder, paths = run_dir / IMPORTED_FOLDER, []
    for item in info.imported.files:
        try:
            path = inside(folder, item.name, f"{run_dir / RUN_FILE} imported.files name")
        except UnsafeNameError as exc:
            raise RunDirError(str(exc)) from None
        if not path.is_file():
            raise RunDirError(f"{path}: missing (run.json lists it among the imported files)")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != item.sha256:
            raise RunDirError(f"{path}: its sha256 is {digest[:16]}..., not the {item.sha256[:16]}... run.json "
                              "recorded when it was imported; the copy was changed (import the original again)")
        paths.append(path)
    return paths


def level_spans(run_dir: Path) -> dict[str, tuple[float, float]]:
    """Each finished level's measured part, in unix seconds."""
    return _spans(read_level_runs(run_dir))


def telemetry_samples(run_dir: Path) -> list[dict[str, Any]]:
    """The server's (and GPUs') samples, one a second, as telemetry.jsonl holds them."""
    return _samples(run_dir / TELEMETRY_FILE)


def _spans(level_runs: dict[str, dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Each finished level's measured part, in unix seconds (what telemetry samples are matched against)."""
    spans = {}
    for level, row in level_runs.items():
        start = row.get("measured_at_unix_s") or row["started_at_unix_s"]
        spans[level] = (start, start + row["wall_s"])
    return spans


def _samples(path: Path) -> list[dict[str, Any]]:
    return list(read_jsonl(path)) if path.is_file() else []


def _sampled(views: Iterable[View]) -> list[View]:
    return [view for view in views if view.num_samples]


def _replica_views(run_dir: Path, spans: dict[str, tuple[float, float]]) -> list[tuple[int, ServerView]]:
    """Behind a router, each replica's own view of each level (telemetry.replica-<i>.jsonl), by index."""
    views = []
    for index in range(len(list(run_dir.glob(REPLICA_TELEMETRY.format(index="*"))))):
        samples = _samples(run_dir / REPLICA_TELEMETRY.format(index=index))
        seen = _sampled(server_view(level, samples, *span) for level, span in spans.items())
        views += [(index, view) for view in seen]
    return views


def _summed(replicas: list[tuple[int, ServerView]], spans: dict[str, tuple[float, float]]) -> list[ServerView]:
    return [summed_view(level, views) for level in spans if (views := [v for _, v in replicas if v.level == level])]


def keep_only_levels(run_dir: Path, levels: set[str],
                     each: Callable[[dict[str, Any]], None] | None = None) -> list[str]:
    """Drop the records of every level not in `levels`; the lines kept are kept byte for byte. Returns the
    labels dropped, in the order they first appear. `each` is given every whole row, kept or dropped, in the same
    one read (what a resumed run needs to know of them)."""
    path = run_dir / REQUESTS_FILE
    if not path.is_file():
        return []
    kept, dropped, cut = [], [], False
    for line in path.read_bytes().splitlines(keepends=True):
        if not line.endswith(b"\n"):  # the last line, cut short by a crash: its level did not finish
            cut = True
            continue
        if not line.strip():
            continue
        row = orjson.loads(line)
        if each is not None:
            each(row)
        level = str(row["level"])
        if level in levels:
            kept.append(line)
        elif level not in dropped:
            dropped.append(level)
    if dropped or cut:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(kept))
        tmp.replace(path)
    return dropped


def read_quality(run_dir: Path) -> dict[str, Any] | None:
    """A run's quality.json, if `bench quality` wrote one."""
    path = run_dir / QUALITY_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def write_summaries(run_dir: Path, summaries: list[LevelSummary]) -> None:
    """summary.json and summary.csv; and repeats.json when a level was measured more than once."""
    rows = [s.flat() for s in summaries]  # every file's content made before any is written
    as_json = json.dumps([s.to_json() for s in summaries], indent=2) + "\n"
    repeated = [asdict(r) for r in aggregate(summaries) if r.num_repeats > 1]
    table = io.StringIO()
    if rows:  # every level's columns, in order of first appearance (a level across adapters has one more)
        writer = csv.DictWriter(table, fieldnames=list(dict.fromkeys(key for row in rows for key in row)))
        writer.writeheader()
        writer.writerows(rows)
    (run_dir / SUMMARY_JSON).write_text(as_json)
    if repeated:
        (run_dir / REPEATS_FILE).write_text(json.dumps(repeated, indent=2) + "\n")
    if rows:
        (run_dir / SUMMARY_CSV).write_text(table.getvalue())
