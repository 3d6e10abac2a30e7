"""Levels measured several times: each headline figure as a mean with its 95 % Student-t interval.

A sweep with `--repeats K` runs its levels K times, in rounds (every level once, then every level again),
so drift over the run shows up as spread rather than as a trend hidden in one level. The interval is of
the mean across repeats, with K - 1 degrees of freedom; the per-repeat values travel with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

from loadgen.types import Interval, LevelSummary, RepeatedLevel

CONFIDENCE = 0.95
# The figures a decision or a reader leans on: name -> how to read it from a summary.
HEADLINE_FIGURES: dict[str, Callable[[LevelSummary], float | None]] = {
    "output_tokens_per_s": lambda s: s.throughput.output_tokens_per_s,
    "request_per_s": lambda s: s.throughput.request_per_s,
    "goodput_request_per_s": lambda s: s.throughput.goodput_request_per_s,
    "slo_attainment": lambda s: s.throughput.slo_attainment,
    "failure_rate": lambda s: s.requests.failure_rate,
    "ttft_ms_p50": lambda s: s.latency.ttft_ms.p50,
    "ttft_ms_p95": lambda s: s.latency.ttft_ms.p95,
    "itl_ms_p50": lambda s: s.latency.itl_ms.p50,
    "itl_ms_p95": lambda s: s.latency.itl_ms.p95,
    "tpot_ms_p50": lambda s: s.latency.tpot_ms.p50,
    "tpot_ms_p95": lambda s: s.latency.tpot_ms.p95,
    "e2e_ms_p50": lambda s: s.latency.e2e_ms.p50,
    "e2e_ms_p95": lambda s: s.latency.e2e_ms.p95,
}


def interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean +- t(1 - alpha/2, n - 1) * s / sqrt(n) over the finite values."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return Interval(math.nan, math.nan, math.nan, ())
    mean = float(np.mean(finite))
    if len(finite) == 1:
        return Interval(mean, mean, mean, tuple(finite))
    half = float(stats.t.ppf((1 + confidence) / 2, len(finite) - 1) * np.std(finite, ddof=1) / math.sqrt(len(finite)))
    return Interval(mean, mean - half, mean + half, tuple(finite))


def by_level(summaries: Sequence[LevelSummary]) -> dict[tuple[str, str], list[LevelSummary]]:
    """(engine, level) -> its repeats in repeat order, in the order the levels first ran; of a level run
    again after the client fell behind (`~2`), only the last attempt of each repeat."""
    groups: dict[tuple[str, str], dict[int, LevelSummary]] = {}
    for s in summaries:
        groups.setdefault((s.engine, s.base_level or s.level), {})[s.repeat] = s  # a later attempt wins
    return {key: [runs[r] for r in sorted(runs)] for key, runs in groups.items()}


def aggregate(summaries: Sequence[LevelSummary]) -> list[RepeatedLevel]:
    """One RepeatedLevel per engine and level (see `by_level`)."""
    repeated = []
    for (engine, level), runs in by_level(summaries).items():
        figures = {name: interval([read(s) for s in runs]) for name, read in HEADLINE_FIGURES.items()}
        repeated.append(RepeatedLevel(engine, level, runs[0].kind, runs[0].target, tuple(s.level for s in runs),
                                      figures))
    return repeated
