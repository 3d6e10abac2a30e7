"""The cost model of COSTMODEL.md, per measured level: what a request costs, and where the SLO holds.

Pure functions over frozen dataclasses: measured levels and prices in, costs out. Nothing here reads a
file or knows a run directory; `costmodel.fleet` sizes a fleet from the operating point found here.

Symbols follow COSTMODEL.md: P = k * p_gpu (USD per replica-hour), R(c) requests/s, X_out(c) output
tokens/s, A(c) SLO attainment, ISL/OSL mean input/output tokens per request, a the provider's price of
one request, b its blended price per 1M tokens, rho(c) = C_req(c) / a the break-even utilization.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from costmodel.prices import ProviderPrice
from costmodel.types import LatencyLimits, LevelCost, MeasuredLevel, OperatingPoint

SECONDS_PER_HOUR = 3600.0
PER_MILLION = 1e6


def mean_lengths(levels: Sequence[MeasuredLevel]) -> tuple[float, float]:
    """ISL and OSL: the mean input and output tokens per request over every level, weighted by requests."""
    num_ok = sum(level.num_ok for level in levels)
    if num_ok == 0:
        return 0.0, 0.0
    mean_input_tokens = sum(level.mean_input_tokens * level.num_ok for level in levels) / num_ok
    mean_output_tokens = sum(level.mean_output_tokens * level.num_ok for level in levels) / num_ok
    return mean_input_tokens, mean_output_tokens


# --- per level ----------------------------------------------------------------------------------------


def cost_per(replica_usd_per_hour: float, units_per_s: float, scale: float = 1.0) -> float | None:
    """P * scale / (3600 * rate): the cost of `scale` units at `units_per_s`; None when nothing is produced."""
    if units_per_s <= 0:
        return None
    return replica_usd_per_hour * scale / (SECONDS_PER_HOUR * units_per_s)


def level_cost(level: MeasuredLevel, replica_usd_per_hour: float, slo: LatencyLimits,
               attainment_target: float) -> LevelCost:
    usd_per_hour, attainment = replica_usd_per_hour, level.slo_attainment
    return LevelCost(
        label=level.label, load=level.load,
        usd_per_request=cost_per(usd_per_hour, level.request_per_s),
        usd_per_m_output_tokens=cost_per(usd_per_hour, level.output_tokens_per_s, PER_MILLION),
        usd_per_m_total_tokens=cost_per(usd_per_hour, level.input_tokens_per_s + level.output_tokens_per_s,
                                        PER_MILLION),
        goodput_usd_per_request=cost_per(usd_per_hour, level.request_per_s * attainment),
        goodput_usd_per_m_output_tokens=cost_per(usd_per_hour, level.output_tokens_per_s * attainment, PER_MILLION),
        slo_problems=slo_problems(level, slo, attainment_target),
    )


def slo_problems(level: MeasuredLevel, slo: LatencyLimits, attainment_target: float) -> tuple[str, ...]:
    """Why a level does not qualify as an operating point; empty when it does."""
    problems = []
    if not level.is_valid:
        problems.append(f"{level.why_invalid} (level invalid)")
    if level.num_ok == 0 or level.request_per_s <= 0:
        problems.append("no request completed")
    if level.slo_attainment < attainment_target:
        problems.append(f"SLO attainment {level.slo_attainment:.1%} < {attainment_target:.0%}")
    for name, value, limit in _latency_checks(level, slo):
        if value is not None and value > limit:
            problems.append(f"p95 {name} {_past(value, limit)} ms > {limit:,.0f} ms")
    if slo.session_s is not None and level.session_p95_s is not None and level.session_p95_s > slo.session_s:
        problems.append(f"p95 session {_past(level.session_p95_s, slo.session_s)} s > {slo.session_s:,.0f} s")
    return tuple(problems)


def _past(value: float, limit: float) -> str:
    """A value over its limit, with as many decimals as it takes to show it is over (40.02, not 40)."""
    for digits in (0, 1, 2):
        if round(value, digits) > limit:
            return f"{value:,.{digits}f}"
    return f"{value:,.3f}"


def _latency_checks(level: MeasuredLevel, slo: LatencyLimits) -> list[tuple[str, float | None, float]]:
    checks = [("TTFT", level.ttft_p95_ms, slo.ttft_ms), ("TTFVT", level.ttfvt_p95_ms, slo.ttfvt_ms),
              ("TPOT", level.tpot_p95_ms, slo.tpot_ms), ("E2E", level.e2e_p95_ms, slo.e2e_ms),
              ("step TTFT", level.step_ttft_p95_ms, slo.step_ttft_ms)]
    return [(name, value, limit) for name, value, limit in checks if limit is not None]


# --- the provider ---------------------------------------------------------------------------------------


def provider_usd_per_request(usd_per_m_input: float, usd_per_m_cached_input: float, usd_per_m_output: float,
                             isl: float, osl: float, cache_hit_rate: float = 0.0,
                             batch_discount: float = 0.0) -> float:
    """a = (ISL * ((1-h) p_in + h p_cached) + OSL * p_out) * (1 - beta) / 1e6."""
    usd_per_m_blended_input = (1 - cache_hit_rate) * usd_per_m_input + cache_hit_rate * usd_per_m_cached_input
    return (isl * usd_per_m_blended_input + osl * usd_per_m_output) * (1 - batch_discount) / PER_MILLION


def blended_usd_per_m_tokens(usd_per_request: float, isl: float, osl: float) -> float:
    """b = a * 1e6 / (ISL + OSL)."""
    return usd_per_request * PER_MILLION / (isl + osl) if isl + osl > 0 else 0.0


def break_even_utilization(self_usd_per_request: float | None, provider_usd_per_request: float) -> float | None:
    """rho = C_req / a: how busy a replica must be on average to cost what the provider charges.
    Above 1 it never wins; None when either side is unbounded or the provider charges nothing."""
    if self_usd_per_request is None or provider_usd_per_request <= 0:
        return None
    return self_usd_per_request / provider_usd_per_request


# --- the operating point ------------------------------------------------------------------------------


def operating_point(levels: Sequence[MeasuredLevel], slo: LatencyLimits,
                    attainment_target: float) -> OperatingPoint | None:
    """c*: the highest *measured* load that meets the SLO with no failing level below it (COSTMODEL.md:
    interpolating toward a failing level overstates capacity, since latency rises faster than linearly near
    saturation; a level that passes above one that failed is noise or a warm-up effect, named in `skipped`).
    None when no level below the first failing one meets it; never beyond the highest measured level."""
    ordered = sorted(levels, key=lambda level: level.load)
    failing = [i for i, level in enumerate(ordered) if slo_problems(level, slo, attainment_target)]
    first_failing = failing[0] if failing else len(ordered)
    if first_failing == 0:
        return None
    level = ordered[first_failing - 1]
    above = ordered[first_failing] if first_failing < len(ordered) else None
    skipped = [ordered[i].label for i in range(first_failing + 1, len(ordered)) if i not in failing]
    if above is None:
        limited_by = "the highest measured level (capacity may be higher: measure more load)"
    elif not above.is_valid:
        limited_by = f"{above.label} above it is invalid ({above.why_invalid})"
    else:
        limited_by = f"{above.label} above it: " + "; ".join(slo_problems(above, slo, attainment_target))
    point = at_level(level, above.label if above else None, limited_by)
    if skipped and above is not None:
        point = replace(point, skipped=f"{', '.join(skipped)} met the SLO too, but {above.label} below "
                                       f"{'them' if len(skipped) > 1 else 'it'} did not: not used (noise or a "
                                       "warm-up effect; measure those loads again)")
    return point


def at_level(level: MeasuredLevel, next_failing: str | None, limited_by: str) -> OperatingPoint:
    """The operating point at a measured level, with its throughput interval when it was repeated."""
    rate_range = level.request_per_s_range
    tokens_range = None
    if rate_range is not None and level.request_per_s > 0:
        per_request = level.output_tokens_per_s / level.request_per_s
        tokens_range = (rate_range[0] * per_request, rate_range[1] * per_request)
    return OperatingPoint(
        load=level.load, request_per_s=level.request_per_s, output_tokens_per_s=level.output_tokens_per_s,
        level=level.label, kind=level.kind, next_failing=next_failing, limited_by=limited_by,
        request_per_s_range=rate_range, output_tokens_per_s_range=tokens_range, num_repeats=level.num_repeats,
        power_w_per_gpu=level.power_w_per_gpu)


def request_price(price: ProviderPrice, isl: float, osl: float, cache_hit_rate: float = 0.0,
                  uses_batch_api: bool = False) -> float:
    """`a` for a catalog row; its batch discount applies only to traffic that can use the batch API."""
    return provider_usd_per_request(price.usd_per_m_input, price.cached_input, price.usd_per_m_output, isl, osl,
                                    cache_hit_rate, price.batch_discount if uses_batch_api else 0.0)
