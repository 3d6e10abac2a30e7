"""The run directory: the contract between a sweep and everything that reads it afterwards.

    runs/<utc-time>-<engine>-<scenario>/
        run.json         RunInfo: tool version, engine, hardware, resolved scenario, levels, seeds, status, and
                         a replayed dataset's path, sha256 and lengths (never its text)
        requests.jsonl   one RequestRecord per line, appended as each request ends
        levels.jsonl     one line per finished level: timing and the client's check on itself (split across
                         client workers: each worker's check, clock offset and start-up)
        summary.csv      one LevelSummary per level (also summary.json); rebuilt by `bench summarize`
        repeats.json     with --repeats: each level's headline figures as mean, 95 % interval and values
        capacity.json    a capacity search's answer and every probe (bench.capacity)
        telemetry.jsonl  the server's /metrics sampled every second, when it publishes them
        engine.log       the engine's output, when the toolkit launched it
        workers.log      local client workers' own output (--workers), when there was any

Everything in a report can be recomputed from these files alone.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from bench.runinfo import RunInfo
from loadgen.columns import columns_by_level
from loadgen.metrics import cut_short, summarize_columns
from loadgen.network import ConnectProbe
from loadgen.recorder import read_jsonl
from loadgen.repeats import aggregate
from loadgen.telemetry import gpu_view, server_view
from loadgen.types import SLO, ClientCheck, GpuView, LevelSummary, MachineLoad, ServerView, WorkerRun

RUN_FILE = "run.json"
REQUESTS_FILE = "requests.jsonl"
LEVELS_FILE = "levels.jsonl"
WORKERS_LOG = "workers.log"  # client workers' own output (--workers), if any
SUMMARY_CSV = "summary.csv"
SUMMARY_JSON = "summary.json"
REPEATS_FILE = "repeats.json"
ENGINE_LOG = "engine.log"
TELEMETRY_FILE = "telemetry.jsonl"
REPLICA_TELEMETRY = "telemetry.replica-{index}.jsonl"  # behind a router: each replica's own /metrics


class RunDirError(Exception):
    """Not a run directory, or one that holds nothing yet; the message names the directory."""


def new_run_dir(root: Path, engine: str, scenario: str, now: datetime | None = None) -> Path:
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    base = root / f"{stamp}-{engine}-{scenario}"
    path, suffix = base, 1
    while path.exists():
        suffix += 1
        path = base.with_name(f"{base.name}-{suffix}")
    path.mkdir(parents=True)
    return path


def write_run_info(run_dir: Path, run: RunInfo) -> None:
    """Written whole to a temporary file, then renamed: a reader never sees half a run.json."""
    tmp = run_dir / (RUN_FILE + ".tmp")
    tmp.write_text(json.dumps(run.to_json(), indent=2, default=str) + "\n")
    tmp.replace(run_dir / RUN_FILE)


def read_run_info(run_dir: Path) -> RunInfo:
    path = run_dir / RUN_FILE
    if not path.is_file():
        raise RunDirError(f"{run_dir}: no {RUN_FILE}; is this a run directory?")
    return RunInfo.from_json(json.loads(path.read_text()))


def read_level_runs(run_dir: Path) -> dict[str, dict[str, Any]]:
    path = run_dir / LEVELS_FILE
    return {row["level"]: row for row in read_jsonl(path)} if path.is_file() else {}


def summarize_run(run_dir: Path, slo: SLO | None = None) -> list[LevelSummary]:
    """Recompute every level's summary from the records on disk, in the order the levels ran."""
    run = read_run_info(run_dir)
    records_path = run_dir / REQUESTS_FILE
    if not records_path.is_file():
        raise RunDirError(f"{run_dir}: no {REQUESTS_FILE}; the sweep ended before any request finished")
    level_runs = read_level_runs(run_dir)
    summaries = []
    # Read as columns, a row at a time: memory grows by a few bytes per token, not by a record object.
    for level, columns in columns_by_level(read_jsonl(records_path)).items():
        row = level_runs.get(level, {})
        client, network, machine = row.get("client"), row.get("network"), row.get("machine")
        workers = [WorkerRun.from_json(w) for w in row.get("workers") or []]
        summary = summarize_columns(columns, slo or run.slo, ClientCheck(**client) if client else None,
                                    ConnectProbe(**network) if network else None, workers,
                                    MachineLoad.from_json(machine) if machine else None)
        summaries.append(summary if row else cut_short(summary, columns))
    return summaries


def server_views(run_dir: Path) -> list[ServerView]:
    """Each measured level as the server saw it (from telemetry.jsonl); empty when nothing was sampled."""
    views = [server_view(level, samples, start, end) for level, samples, start, end in _level_samples(run_dir)]
    return [view for view in views if view.num_samples]


def replica_views(run_dir: Path) -> list[tuple[int, ServerView]]:
    """Each level as each replica behind a router saw it (telemetry.replica-<i>.jsonl), by replica index."""
    views = []
    for index in range(len(list(run_dir.glob(REPLICA_TELEMETRY.format(index="*"))))):
        path = run_dir / REPLICA_TELEMETRY.format(index=index)
        views += [(index, view) for view in _views_from(path, run_dir) if view.num_samples]
    return views


def _views_from(path: Path, run_dir: Path) -> list[ServerView]:
    samples = list(read_jsonl(path)) if path.is_file() else []
    spans = []
    for level, row in read_level_runs(run_dir).items() if samples else []:
        start = row.get("measured_at_unix_s") or row["started_at_unix_s"]
        spans.append(server_view(level, samples, start, start + row["wall_s"]))
    return spans


def gpu_views(run_dir: Path) -> list[GpuView]:
    """Each measured level as the GPUs saw it (power, utilization; from telemetry.jsonl); empty when they
    were not read."""
    views = [gpu_view(level, samples, start, end) for level, samples, start, end in _level_samples(run_dir)]
    return [view for view in views if view.num_samples]


def _level_samples(run_dir: Path) -> list[tuple[str, list[dict[str, Any]], float, float]]:
    path = run_dir / TELEMETRY_FILE
    samples = list(read_jsonl(path)) if path.is_file() else []
    if not samples:
        return []
    spans = []
    for level, row in read_level_runs(run_dir).items():
        start = row.get("measured_at_unix_s") or row["started_at_unix_s"]
        spans.append((level, samples, start, start + row["wall_s"]))
    return spans


def keep_only_levels(run_dir: Path, levels: set[str]) -> list[str]:
    """Drop the records of every level not in `levels`; the lines kept are kept byte for byte. Returns the
    labels dropped, in the order they first appear."""
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
        level = str(orjson.loads(line)["level"])
        if level in levels:
            kept.append(line)
        elif level not in dropped:
            dropped.append(level)
    if dropped or cut:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(kept))
        tmp.replace(path)
    return dropped


def write_summaries(run_dir: Path, summaries: list[LevelSummary]) -> None:
    """summary.json and summary.csv; and repeats.json when a level was measured more than once."""
    rows = [s.flat() for s in summaries]  # every file's content made before any is written
    as_json = json.dumps([asdict(s) for s in summaries], indent=2) + "\n"
    repeated = [asdict(r) for r in aggregate(summaries) if r.num_repeats > 1]
    table = io.StringIO()
    if rows:
        writer = csv.DictWriter(table, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (run_dir / SUMMARY_JSON).write_text(as_json)
    if repeated:
        (run_dir / REPEATS_FILE).write_text(json.dumps(repeated, indent=2) + "\n")
    if rows:
        (run_dir / SUMMARY_CSV).write_text(table.getvalue())
