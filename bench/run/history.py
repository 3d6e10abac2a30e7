"""Every finished run's levels in one embedded database (SQLite, `.history/history.sqlite` in the runs folder), so that
"did the upgrade make us slower?" has an answer with an interval.

A row is one level of one run. Its configuration key is what must be equal for two runs to be compared: the
engine, its version, the model and the weights' format, the engine's arguments, the scenario (its workload and
load, hashed) and the hardware (CPU model, GPU names). `trend` gives each configuration's runs in time order and
flags the newest one as a regression (or an improvement) when its value lies outside the 95 % prediction
interval of the earlier runs of the same configuration (Student's t, at least two earlier runs); a run measured
with repeats is compared by its repeats' mean and interval, against the earlier runs' (the intervals must not
overlap). Nothing here starts a server; the file is created on first use.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import statistics
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from scipy import stats

from bench.run.rundir import Run
from common.private import make_private_dir
from common.secrets import redact

HISTORY_FOLDER = ".history"  # in the runs folder, hidden: `bench report runs/*` still names run directories only
HISTORY_FILE = "history.sqlite"
METRICS = {  # metric -> (summary figure, higher is better)
    "output_tokens_per_s": ("output_tokens_per_s", True),
    "request_per_s": ("request_per_s", True),
    "ttft_p50_ms": ("ttft_p50_ms", False),
    "ttft_p95_ms": ("ttft_p95_ms", False),
    "tpot_p50_ms": ("tpot_p50_ms", False),
    "e2e_p50_ms": ("e2e_p50_ms", False),
}
_COLUMNS = ("run_id", "run_dir", "finished_at", "config_key", "engine", "engine_version", "model", "weights",
            "engine_args", "scenario", "scenario_hash", "hardware", "source", "level", "base_level", "repeat",
            "is_valid", *METRICS)
_SCHEMA = f"""CREATE TABLE IF NOT EXISTS levels ({', '.join(
    f'{c} {"REAL" if c in METRICS else "INTEGER" if c in ("repeat", "is_valid") else "TEXT"}' for c in _COLUMNS)},
    PRIMARY KEY (run_id, level))"""


class HistoryError(ValueError):
    """A history request that can't be answered; the message says what to give."""


@dataclass(frozen=True)
class Point:
    """One run of one configuration at one level: its value (its repeats' mean) and its repeats' values."""

    run_id: str
    finished_at: str
    value: float
    values: tuple[float, ...]


@dataclass(frozen=True)
class Trend:
    """One configuration at one level, its runs in time order, and what the newest one did."""

    config_key: str
    label: str  # engine version, model, weights, hardware: in words
    level: str
    metric: str
    points: tuple[Point, ...]
    verdict: str  # regression, improvement, steady, or too few runs
    interval: tuple[float, float] | None  # where the newest was expected (the earlier runs' 95 % interval)


def history_path(runs_root: Path) -> Path:
    return runs_root / HISTORY_FOLDER / HISTORY_FILE


def record_run(run: Run, runs_root: Path) -> int:
    """Add (or replace) every level of `run` in the runs folder's history; the rows written."""
    info, weights = run.info, run.precision
    spec = info.engine_spec
    scenario = info.scenario
    scenario_json = json.dumps({"workload": scenario.workload.model_dump(mode="json"),
                                "load": scenario.load.model_dump(mode="json")} if scenario else {}, sort_keys=True)
    hardware = info.hardware
    hardware_text = " + ".join(filter(None, [hardware.cpu_model if hardware else None,
                                             *(g.name for g in (hardware.gpus or []))] if hardware else [])) or "?"
    args = json.dumps(redact(spec.args) if spec else {}, sort_keys=True)  # from an older run.json too
    engine, version, model = info.engine.name, info.engine.version or "?", info.engine.model or "?"
    scenario_hash = hashlib.sha256(scenario_json.encode()).hexdigest()[:16]
    parts = [engine, version, model, weights, args, scenario_hash, hardware_text]
    if info.imported:  # another tool's figures, by its definitions: a configuration of their own
        parts.append(info.imported.tool)
    key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]
    rows = []
    for s in run.summaries:
        figures = {"output_tokens_per_s": s.throughput.output_tokens_per_s, "request_per_s": s.throughput.request_per_s,
                   "ttft_p50_ms": s.latency.ttft_ms.p50, "ttft_p95_ms": s.latency.ttft_ms.p95,
                   "tpot_p50_ms": s.latency.tpot_ms.p50, "e2e_p50_ms": s.latency.e2e_ms.p50}
        rows.append((info.run_id, str(run.run_dir), info.finished_at or info.started_at or "", key, engine, version,
                     model, weights or "", args, scenario.name if scenario else "", scenario_hash, hardware_text,
                     info.source(), s.level, s.base_level, s.repeat, int(s.is_valid), *(figures[m] for m in METRICS)))
    with _connect(history_path(runs_root)) as db:
        db.executemany(f"INSERT OR REPLACE INTO levels VALUES ({', '.join('?' * len(_COLUMNS))})", rows)
    return len(rows)


def trends(runs_root: Path, metric: str = "output_tokens_per_s", engine: str | None = None,
           model: str | None = None, level: str | None = None) -> list[Trend]:
    """Each configuration's runs at each level (a level's repeats folded into one point), newest last."""
    if metric not in METRICS:
        raise HistoryError(f"--metric {metric}: expected one of {', '.join(METRICS)}")
    path = history_path(runs_root)
    if not path.is_file():
        raise HistoryError(f"{path}: no history yet (every finished `bench sweep` into {runs_root} adds to it; "
                           f"`bench history --import RUN_DIR...` adds runs made before)")
    where, params = ["is_valid = 1"], []
    for column, value in (("engine", engine), ("model", model), ("base_level", level)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    with _connect(path) as db:
        rows = db.execute(f"SELECT config_key, engine, engine_version, model, weights, hardware, base_level, run_id, "
                          f"finished_at, {metric} FROM levels WHERE {' AND '.join(where)} AND {metric} IS NOT NULL "
                          f"ORDER BY finished_at, run_id", params).fetchall()
        if not rows:
            raise HistoryError(_why_nothing(db, where[1:], params, metric))
    groups: dict[tuple[str, str], list[tuple]] = {}
    for row in rows:
        groups.setdefault((row[0], row[6]), []).append(row)
    result = []
    for (key, base), members in groups.items():
        by_run: dict[str, list[float]] = {}
        finished: dict[str, str] = {}
        for row in members:
            by_run.setdefault(row[7], []).append(float(row[9]))
            finished[row[7]] = row[8]
        points = tuple(Point(run_id, finished[run_id], statistics.fmean(values), tuple(values))
                       for run_id, values in by_run.items())
        first = members[0]
        label = f"{first[1]} {first[2]}, {first[3]}" + (f" ({first[4]})" if first[4] else "") + f", {first[5]}"
        verdict, interval = judge(points, METRICS[metric][1])
        result.append(Trend(key, label, base, metric, points, verdict, interval))
    return sorted(result, key=lambda t: (t.label, t.level))


def _why_nothing(db: sqlite3.Connection, filters: list[str], params: list[str], metric: str) -> str:
    """Why no trend is shown: nothing matches the filters, or what matches was judged invalid or lacks the
    metric (each said with its count, so an empty answer is never taken for a filter's fault)."""
    given = " / ".join(f"--{f.split()[0].replace('base_', '')} {p}" for f, p in zip(filters, params, strict=True))
    matching = f" matching {given}" if given else ""
    where = f"WHERE {' AND '.join(filters)}" if filters else ""
    total, valid = db.execute(f"SELECT COUNT(*), COALESCE(SUM(is_valid), 0) FROM levels {where}", params).fetchone()
    if total == 0:
        return f"no level of the history{matching}" if given else "the history holds no level yet"
    if valid == 0:
        return (f"the history holds {total} level(s){matching}, none valid (each was judged invalid when measured, "
                "e.g. too few requests in its steady window: see its run's summary); only valid levels make trends")
    return f"none of the {valid} valid level(s){matching} has {metric}"


def judge(points: Sequence[Point], higher_is_better: bool) -> tuple[str, tuple[float, float] | None]:
    """The newest point against the earlier ones: outside their 95 % prediction interval (or, with repeats,
    intervals that don't overlap) is a regression or an improvement."""
    if len(points) < 3:
        return "too few runs (3 are needed: the newest and two before it)", None
    *earlier, newest = points
    values = [p.value for p in earlier]
    mean, sd, n = statistics.fmean(values), statistics.stdev(values), len(values)
    t = float(stats.t.ppf(0.975, n - 1))
    if len(newest.values) > 1:  # repeats: the newest's own interval against the earlier runs' mean's
        half_new = float(stats.t.ppf(0.975, len(newest.values) - 1)) * statistics.stdev(newest.values) / math.sqrt(
            len(newest.values))
        low, high = mean - t * sd / math.sqrt(n), mean + t * sd / math.sqrt(n)
        outside_low, outside_high = newest.value + half_new < low, newest.value - half_new > high
    else:
        half = t * sd * math.sqrt(1 + 1 / n)
        low, high = mean - half, mean + half
        outside_low, outside_high = newest.value < low, newest.value > high
    if not (outside_low or outside_high):
        return "steady", (low, high)
    worse = outside_low if higher_is_better else outside_high
    return ("regression" if worse else "improvement"), (low, high)


@contextmanager
def _connect(path: Path) -> Iterator[sqlite3.Connection]:
    """The database, its table made if new; committed and closed on leaving."""
    make_private_dir(path.parent, exist_ok=True)
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(_SCHEMA)
        yield db
