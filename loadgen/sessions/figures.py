"""A level's calls -> its figures as agent sessions (`SessionFigures`), from the same columns every summary uses.

- A session is completed when every call it holds (`session_requests`) was answered, failed when one of its
  calls failed (a context overflow included), cut otherwise (the level ended first). Durations and calls per
  session are those of the completed sessions: from its first call's send to its last call's end.
- Sessions per hour: those completed inside the steady window, over the window. Sessions alive: each
  session's span (first send -> last end) over the window, averaged. Sessions carried a second (what the cost
  model prices): sessions alive over the mean duration (Little's law), steadier than counting completions.
- Tokens per task: means over the completed sessions of their calls' prompt, cached and output tokens.
- TTFT and input tokens by step: each call's step within its own agent (1, 2-5, 6-20, 21+).
- Hit rates over prompt tokens (the server's count): implied, the tokens each call's own agent had sent
  before (`implied_cached_tokens`); measured, the server's `cached_tokens`, where it said.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from loadgen.columns import NONE, LevelColumns
from loadgen.types import STEP_BUCKETS, Distribution, LaneBar, SessionFigures, SessionLane, SessionTokens


def session_figures(c: LevelColumns, first: np.ndarray, window: tuple[float, float]) -> SessionFigures | None:
    """`first`: each request's first-chunk time after its send (NaN without one); `window`: the steady window."""
    if c.session is None:
        return None
    k, t, ok = c.counts, c.times, c.ok
    session = c.session
    inside = session != NONE
    ids = session[inside]
    num = len(c.session_ids)
    send, end = t["send_s"][inside], np.where(np.isnan(t["end_s"]), t["send_s"], t["end_s"])[inside]
    began, ended = np.full(num, np.inf), np.full(num, -np.inf)
    np.minimum.at(began, ids, send)
    np.maximum.at(ended, ids, end)
    calls = np.bincount(ids, minlength=num)
    answered = np.bincount(ids, weights=ok[inside], minlength=num)
    planned = np.zeros(num, dtype=np.int64)
    planned[ids] = k["session_requests"][inside]
    failed = calls > answered
    completed = ~failed & (answered >= planned)
    start, stop = window
    span = max(stop - start, 1e-9)
    overlap = np.maximum(0.0, np.minimum(ended, stop) - np.maximum(began, start))
    durations = (ended - began)[completed]
    mean_alive = float(overlap.sum()) / span
    measured = _rate(k["cached_tokens"], k["prompt_tokens"], inside & ok, none_is_zero=True)
    return SessionFigures(
        num_started=num, num_completed=int(completed.sum()), num_cut=int((~failed & ~completed).sum()),
        num_failed=int(failed.sum()), duration_s=Distribution.of(durations),
        per_hour=int((completed & (ended >= start) & (ended <= stop)).sum()) / span * 3600,
        requests_per_session=Distribution.of(calls[completed]), mean_alive=mean_alive,
        ttft_ms_by_step=_by_step(k["step"], inside & ok, first * 1000),
        input_tokens_by_step=_mean_by_step(k["step"], inside & ok & (k["prompt_tokens"] != NONE), k["prompt_tokens"]),
        implied_hit_rate=_rate(k["implied_cached_tokens"], k["prompt_tokens"], inside & ok),
        measured_hit_rate=measured,
        num_context_overflow=c.failures_by_kind.get("context_overflow", 0),
        num_subagent_requests=int(c.is_subagent.sum()) if c.is_subagent is not None else 0,
        per_s=mean_alive / float(durations.mean()) if durations.size and durations.mean() > 0 else None,
        tokens=_task_tokens(c, ids, inside, completed, cached_measured=measured is not None),
    )


def _task_tokens(c: LevelColumns, ids: np.ndarray, inside: np.ndarray, completed: np.ndarray,
                 cached_measured: bool) -> SessionTokens | None:
    """Means over the completed sessions of their calls' tokens; cached as the server said where it said it for
    any call of the level (a count left out is 0), else as the trace implies."""
    if not completed.any():
        return None
    k = c.counts
    mine = completed[ids]

    def per_session(name: str) -> float:
        values = k[name][inside][mine]
        return float(np.where(values == NONE, 0, values).sum()) / int(completed.sum())

    cached = "cached_tokens" if cached_measured else "implied_cached_tokens"
    return SessionTokens(per_session("prompt_tokens"), per_session(cached), per_session("output_tokens"),
                         "measured" if cached_measured else "implied")


def _bucket(steps: np.ndarray, low: int, high: int | None) -> np.ndarray:
    return (steps >= low) & (steps <= (high if high is not None else np.iinfo(np.int64).max))


def _by_step(steps: np.ndarray, which: np.ndarray, values: np.ndarray) -> dict[str, Distribution]:
    return {label: Distribution.of(values[which & _bucket(steps, low, high) & ~np.isnan(values)])
            for low, high, label in STEP_BUCKETS}


def _mean_by_step(steps: np.ndarray, which: np.ndarray, values: np.ndarray) -> dict[str, float | None]:
    means: dict[str, float | None] = {}
    for low, high, label in STEP_BUCKETS:
        picked = values[which & _bucket(steps, low, high)]
        means[label] = float(picked.mean()) if picked.size else None
    return means


def _rate(part: np.ndarray, whole: np.ndarray, which: np.ndarray, none_is_zero: bool = False) -> float | None:
    """sum(part) / sum(whole) over the requests that have both; None when none has `part`. `none_is_zero`: a
    request without `part` counts as 0 once any has it (a server may leave out a cached count of 0)."""
    has_part = which & (part != NONE)
    if not has_part.any():
        return None
    counted = (which if none_is_zero else has_part) & (whole != NONE)
    total = int(whole[counted].sum())
    return int(part[counted & (part != NONE)].sum()) / total if total else None


def pick_lane(rows: Iterable[dict[str, Any]], level: str) -> SessionLane | None:
    """The completed session of `level` with the most agents, then the most calls (the one that shows the most
    of the rules), from requests.jsonl's rows; None when the level completed none."""
    sessions: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("level") == level and row.get("session_id") and not row.get("is_warmup"):
            sessions.setdefault(row["session_id"], []).append(row)
    done = [calls for calls in sessions.values()
            if len(calls) == calls[0].get("session_requests") and all(c.get("ok") for c in calls)]
    if not done:
        return None
    calls = max(done, key=lambda c: (len({r["agent"] for r in c}), len(c)))
    origin = min(r["send_s"] for r in calls)
    bars = tuple(LaneBar(r["agent"], r["step"], r["send_s"] - origin,
                         r["send_s"] - origin + r["chunk_times_s"][0] if r.get("chunk_times_s") else None,
                         (r.get("end_s") or r["send_s"]) - origin, bool(r.get("ok")))
                 for r in sorted(calls, key=lambda r: r["send_s"]))
    return SessionLane(level, calls[0]["session_id"], bars)
