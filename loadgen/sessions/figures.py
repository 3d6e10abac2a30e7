"""A level's calls -> its figures as agent sessions (`SessionFigures`), from the same columns every summary uses.

- A session is completed when every call it holds (`session_requests`) was answered, failed when one of its
  calls failed (a context overflow included), cut otherwise (the level ended first). Durations and calls per
  session are those of the completed sessions: from its first call's send to its last call's end.
- Sessions per hour: those completed inside the steady window, over the window. Sessions alive: each
  session's span (first send -> last end) over the window, averaged.
- TTFT and input tokens by step: each call's step within its own agent (1, 2-5, 6-20, 21+).
- Hit rates over prompt tokens (the server's count): implied, the tokens each call's own agent had sent
  before (`implied_cached_tokens`); measured, the server's `cached_tokens`, where it said.
"""

from __future__ import annotations

import numpy as np

from loadgen.columns import NONE, LevelColumns
from loadgen.types import STEP_BUCKETS, Distribution, SessionFigures


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
    return SessionFigures(
        num_started=num, num_completed=int(completed.sum()), num_cut=int((~failed & ~completed).sum()),
        num_failed=int(failed.sum()), duration_s=Distribution.of((ended - began)[completed]),
        per_hour=int((completed & (ended >= start) & (ended <= stop)).sum()) / span * 3600,
        requests_per_session=Distribution.of(calls[completed]), mean_alive=float(overlap.sum()) / span,
        ttft_ms_by_step=_by_step(k["step"], inside & ok, first * 1000),
        input_tokens_by_step=_mean_by_step(k["step"], inside & ok & (k["prompt_tokens"] != NONE), k["prompt_tokens"]),
        implied_hit_rate=_rate(k["implied_cached_tokens"], k["prompt_tokens"], inside & ok),
        measured_hit_rate=_rate(k["cached_tokens"], k["prompt_tokens"], inside & ok, none_is_zero=True),
        num_context_overflow=c.failures_by_kind.get("context_overflow", 0),
        num_subagent_requests=int(c.is_subagent.sum()) if c.is_subagent is not None else 0,
    )


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
