"""Measurements as the cost model takes them: LevelSummary -> MeasuredLevel, SLO -> LatencyLimits, and the
repeats of a level -> one MeasuredLevel with its throughput interval. Also how a capacity probe is judged,
so a search and a report agree on what meets the SLO."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import cast

from costmodel.model import slo_problems
from costmodel.types import LatencyLimits, LevelKind, MeasuredLevel, TokenUsage
from loadgen.arrivals import parse_label
from loadgen.repeats import by_level, interval
from loadgen.types import SLO, GpuView, LevelSummary, ServerView


def latency_limits(slo: SLO) -> LatencyLimits:
    return LatencyLimits(ttft_ms=slo.ttft_ms, tpot_ms=slo.tpot_ms, e2e_ms=slo.e2e_ms, ttfvt_ms=slo.ttfvt_ms,
                         session_s=slo.session_s, step_ttft_ms=slo.step_ttft_ms)


def level_from_summary(summary: LevelSummary) -> MeasuredLevel:
    """What the cost model needs of one measured level (its request rate from tokens: see MeasuredLevel)."""
    carried, latency = summary.throughput, summary.latency
    mean_input_tokens = _finite(summary.tokens.mean_input_tokens)
    mean_output_tokens = _finite(summary.tokens.mean_output_tokens)
    request_per_s = carried.output_tokens_per_s / mean_output_tokens if mean_output_tokens > 0 else 0.0
    session_p95_s, step_ttft_p95_ms = _session_latencies(summary)
    return MeasuredLevel(
        label=summary.level, load=summary.target, request_per_s=request_per_s,
        output_tokens_per_s=carried.output_tokens_per_s, input_tokens_per_s=request_per_s * mean_input_tokens,
        slo_attainment=carried.slo_attainment, ttft_p95_ms=latency.ttft_ms.p95, tpot_p95_ms=latency.tpot_ms.p95,
        e2e_p95_ms=latency.e2e_ms.p95, ttfvt_p95_ms=latency.ttfvt_ms.p95, mean_input_tokens=mean_input_tokens,
        mean_output_tokens=mean_output_tokens, num_ok=summary.requests.num_ok, is_valid=summary.is_valid,
        why_invalid=_why_invalid(summary),
        summary_request_per_s=carried.request_per_s,
        kind=cast(LevelKind, summary.kind),  # MeasuredLevel checks it is one it knows
        session_p95_s=session_p95_s, step_ttft_p95_ms=step_ttft_p95_ms,
    )


def _session_latencies(summary: LevelSummary) -> tuple[float | None, float | None]:
    """Agent sessions: the p95 of a completed session's duration, and the worst step bucket's p95 TTFT."""
    figures = summary.sessions
    if figures is None:
        return None, None
    steps = [d.p95 for d in figures.ttft_ms_by_step.values() if d.p95 is not None]
    return figures.duration_s.p95, max(steps) if steps else None


def task_level(summary: LevelSummary) -> MeasuredLevel | None:
    """A level of agent sessions priced per task: its rate is tasks (sessions) a second, its lengths a task's
    tokens; None when it completed no session (no task to price)."""
    figures = summary.sessions
    if figures is None or figures.tokens is None or not figures.per_s:
        return None
    level, tokens = level_from_summary(summary), figures.tokens
    return replace(level, request_per_s=figures.per_s, output_tokens_per_s=figures.per_s * tokens.output_tokens,
                   input_tokens_per_s=figures.per_s * tokens.input_tokens, mean_input_tokens=tokens.input_tokens,
                   mean_output_tokens=tokens.output_tokens, num_ok=figures.num_completed,
                   summary_request_per_s=figures.per_hour / 3600)

def repeated_level(summaries: Sequence[LevelSummary], label: str | None = None) -> MeasuredLevel:
    """Several measurements of one level (its repeats) as one: every figure their mean, the request rate
    also as its 95 % interval; valid only if every repeat was. One summary is that summary's level."""
    repeats = [level_from_summary(summary) for summary in summaries]
    if len(repeats) == 1:
        return repeats[0] if label is None else replace(repeats[0], label=label)
    rates = interval([repeat.request_per_s for repeat in repeats])

    def mean(values: Sequence[float | None]) -> float | None:
        known = [v for v in values if v is not None and math.isfinite(v)]
        return sum(known) / len(known) if known else None

    return MeasuredLevel(
        label=label or summaries[0].base_level or summaries[0].level,
        load=mean([repeat.load for repeat in repeats]) or 0.0, request_per_s=rates.mean,
        output_tokens_per_s=mean([repeat.output_tokens_per_s for repeat in repeats]) or 0.0,
        input_tokens_per_s=mean([repeat.input_tokens_per_s for repeat in repeats]) or 0.0,
        slo_attainment=mean([repeat.slo_attainment for repeat in repeats]) or 0.0,
        ttft_p95_ms=mean([repeat.ttft_p95_ms for repeat in repeats]),
        tpot_p95_ms=mean([repeat.tpot_p95_ms for repeat in repeats]),
        e2e_p95_ms=mean([repeat.e2e_p95_ms for repeat in repeats]),
        ttfvt_p95_ms=mean([repeat.ttfvt_p95_ms for repeat in repeats]),
        mean_input_tokens=mean([repeat.mean_input_tokens for repeat in repeats]) or 0.0,
        mean_output_tokens=mean([repeat.mean_output_tokens for repeat in repeats]) or 0.0,
        num_ok=sum(repeat.num_ok for repeat in repeats), is_valid=all(repeat.is_valid for repeat in repeats),
        summary_request_per_s=mean([repeat.summary_request_per_s for repeat in repeats]),
        request_per_s_range=(max(0.0, rates.low), rates.high), num_repeats=len(repeats), kind=repeats[0].kind,
        why_invalid=next((repeat.why_invalid for repeat in repeats if not repeat.is_valid), repeats[0].why_invalid),
    )


def _why_invalid(summary: LevelSummary) -> str:
    """An invalid level's reasons in a few words: it was cut short, or the client fell behind (every other
    reason the summary gives is the client's: its loop, its CPU, the concurrency it held, a starved worker)."""
    cut = any(reason.startswith("cut short") for reason in summary.invalid_reasons)
    return "it was cut short before its end" if cut else "the client fell behind"


def measured_levels(summaries: Sequence[LevelSummary]) -> tuple[MeasuredLevel, ...]:
    """One MeasuredLevel per level, its repeats folded into one (with the throughput interval)."""
    return tuple(repeated_level(runs, level) for (_, level), runs in by_level(summaries).items())


def slo_problems_of(summary: LevelSummary, slo: SLO, attainment_target: float) -> tuple[str, ...]:
    """Why the level does not meet the SLO (the cost model's own rule); empty when it does."""
    return slo_problems(level_from_summary(summary), latency_limits(slo), attainment_target)


def slo_margin(s: LevelSummary, slo: SLO, attainment_target: float) -> float | None:
    """How close the level is to its SLO, as the worst ratio of measured to allowed: each p95 over its limit
    (<= 1 holds), which moves smoothly with load. Only when no latency is limited, the share of requests
    missing a target over the share allowed to miss. None when nothing was measured."""
    if not s.requests.num_ok:
        return None
    latency = s.latency
    session_p95_s, step_ttft_p95_ms = _session_latencies(s)
    ratios = [value / limit for value, limit in ((latency.ttft_ms.p95, slo.ttft_ms), (latency.tpot_ms.p95, slo.tpot_ms),
                                                 (latency.e2e_ms.p95, slo.e2e_ms), (latency.ttfvt_ms.p95, slo.ttfvt_ms),
                                                 (session_p95_s, slo.session_s), (step_ttft_p95_ms, slo.step_ttft_ms))
              if value is not None and limit is not None]
    if not ratios and attainment_target < 1:
        ratios.append((1 - s.throughput.slo_attainment) / (1 - attainment_target))
    return max(ratios) if ratios else None


def _finite(value: float | None) -> float:
    return value if value is not None and math.isfinite(value) else 0.0


def token_usage(s: LevelSummary) -> TokenUsage:
    u = s.tokens.usage
    return TokenUsage(num_requests=u.num_requests, num_with_usage=u.num_with_usage, prompt_tokens=u.prompt_tokens,
                      cached_prompt_tokens=u.cached_prompt_tokens, completion_tokens=u.completion_tokens,
                      asked_output_tokens=u.asked_output_tokens, counted_output_tokens=u.counted_output_tokens,
                      reasoning_tokens=u.reasoning_tokens)


def measured_cache_hit_rate(summaries: Sequence[LevelSummary], views: Sequence[ServerView]) -> tuple[float, str] | None:
    """The prompt-cache hit rate the runs measured, and how: from the `cached_tokens` the server reported in
    its usage (prompt tokens pooled over levels), else from its own prefix-cache metrics; None: neither."""
    reported = [s.tokens.usage for s in summaries if s.tokens.usage.num_with_cached_count]
    prompt = sum(u.prompt_tokens for u in reported)
    if prompt:
        rate = sum(u.cached_prompt_tokens for u in reported) / prompt
        return rate, f"measured: cached_tokens in the server's usage, {len(reported)} level(s)"
    rates = [v.prefix_cache_hit_rate for v in views if v.prefix_cache_hit_rate is not None]
    if rates:
        return sum(rates) / len(rates), f"measured: the server's prefix-cache metrics, {len(rates)} level(s)"
    return None


def power_per_gpu(views: Sequence[GpuView], is_level: Callable[[str], bool]) -> float | None:
    """The GPUs' mean draw per GPU over the levels `is_level` picks; None where none was read."""
    watts = [v.mean_power_w / v.num_gpus for v in views
             if v.mean_power_w is not None and v.num_gpus and is_level(v.level)]
    return sum(watts) / len(watts) if watts else None


def with_power(levels: Sequence[MeasuredLevel], views: Sequence[GpuView]) -> tuple[MeasuredLevel, ...]:
    """Each level with its GPUs' mean draw per GPU, where they were read (a repeated level: over its repeats)."""
    def same_level(label: str) -> Callable[[str], bool]:
        base = parse_label(label).base
        return lambda other: parse_label(other).base == base

    with_watts = [(level, power_per_gpu(views, same_level(level.label))) for level in levels]
    return tuple(level if watts is None else replace(level, power_w_per_gpu=watts) for level, watts in with_watts)
