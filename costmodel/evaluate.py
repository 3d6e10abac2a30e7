"""One engine against the prices: what each measured level costs, the operating point, the fleet the
traffic needs there, and each compared provider's price, monthly bill and crossover at the same lengths.

Pure, like the rest of the cost model: `decide` calls `evaluate` once per engine with the pricing it has
resolved; nothing here picks between engines or words a verdict.
"""

from __future__ import annotations

from costmodel.fleet import crossover, fleet_for
from costmodel.model import (
    at_level,
    blended_usd_per_m_tokens,
    break_even_utilization,
    cost_per,
    level_cost,
    mean_lengths,
    operating_point,
    request_price,
    slo_problems,
)
from costmodel.prices import ProviderPrice
from costmodel.types import (
    Assumptions,
    CostResult,
    Crossover,
    EngineLevels,
    FleetPlan,
    LatencyLimits,
    LevelCost,
    OperatingPoint,
    ProviderCost,
    ResolvedPricing,
)

MIX_MISMATCH = 0.10  # input share of the traffic vs the measured workload, before a warning
RATE_MISMATCH = 0.25  # window request count vs token-derived rate at the operating point, before a warning


def evaluate(engine: EngineLevels, slo: LatencyLimits, attainment_target: float,
             pricing: ResolvedPricing) -> CostResult:
    """One engine's CostResult: each measured level's cost; its operating point (the capacity a search found
    when it meets `slo`, else the highest measured level that does; with neither, the reason); the cost of a
    request and the fleet for the traffic there (with their ranges over a throughput interval); each
    provider's and reference's price at the engine's measured lengths; what the measurements leave doubtful."""
    assumptions = pricing.assumptions
    mean_input_tokens, mean_output_tokens = mean_lengths(engine.levels)
    level_costs = tuple(level_cost(level, assumptions.replica_usd_per_hour, slo, attainment_target)
                        for level in sorted(engine.levels, key=lambda level: level.load))
    point = _point(engine, slo, attainment_target)
    fleet, fleet_range = _fleets(point, pricing.monthly_tokens, mean_input_tokens, mean_output_tokens, assumptions)
    usd_per_request, usd_per_request_range = _usd_per_request(point, assumptions.replica_usd_per_hour)
    secondary = [row for row in pricing.references if row not in pricing.providers]  # compared only when no provider is
    providers = tuple(_provider_cost(row, row in secondary, mean_input_tokens, mean_output_tokens, point,
                                     usd_per_request, fleet, assumptions)
                      for row in (*pricing.providers, *secondary))
    warnings = _warnings(engine, point, pricing, mean_input_tokens, mean_output_tokens)
    return CostResult(
        engine=engine.engine, isl=mean_input_tokens, osl=mean_output_tokens,
        replica_usd_per_hour=assumptions.replica_usd_per_hour, levels=level_costs, operating_point=point,
        no_operating_point_reason="" if point else _no_point_reason(level_costs), usd_per_request=usd_per_request,
        fleet=fleet, providers=providers, warnings=tuple(warnings), fleet_range=fleet_range,
        usd_per_request_range=usd_per_request_range)


def _point(engine: EngineLevels, slo: LatencyLimits, attainment_target: float) -> OperatingPoint | None:
    """The capacity a search found, when it meets the SLO; else the highest measured level that does."""
    found = engine.capacity
    if found is not None and not slo_problems(found, slo, attainment_target):
        return at_level(found, None, "the capacity search: the next load it tried did not meet the SLO")
    return operating_point(engine.levels, slo, attainment_target)


def _fleets(point: OperatingPoint | None, monthly_tokens: float | None, mean_input_tokens: float,
            mean_output_tokens: float,
            assumptions: Assumptions) -> tuple[FleetPlan | None, tuple[FleetPlan, FleetPlan] | None]:
    """The fleet for the traffic at the operating point and, over a throughput interval, at its high end
    (fewer replicas) and its low end; None without a point or a volume."""
    if point is None or monthly_tokens is None:
        return None, None

    def fleet_at(request_per_s: float) -> FleetPlan:
        return fleet_for(monthly_tokens, request_per_s, mean_input_tokens, mean_output_tokens, assumptions)

    if point.request_per_s_range is None:
        return fleet_at(point.request_per_s), None
    low, high = point.request_per_s_range
    return fleet_at(point.request_per_s), (fleet_at(high), fleet_at(max(low, 1e-9)))


def _usd_per_request(point: OperatingPoint | None,
                     replica_usd_per_hour: float) -> tuple[float | None, tuple[float, float] | None]:
    """C_req at the operating point and, over a throughput interval with a low end above 0, at its high and
    low ends (cheapest first)."""
    if point is None:
        return None, None
    usd_per_request = cost_per(replica_usd_per_hour, point.request_per_s)
    if point.request_per_s_range is None or point.request_per_s_range[0] <= 0:
        return usd_per_request, None
    low, high = point.request_per_s_range
    return usd_per_request, (cost_per(replica_usd_per_hour, high) or 0.0, cost_per(replica_usd_per_hour, low) or 0.0)


def _provider_cost(row: ProviderPrice, is_secondary: bool, mean_input_tokens: float, mean_output_tokens: float,
                   point: OperatingPoint | None, self_usd_per_request: float | None, fleet: FleetPlan | None,
                   assumptions: Assumptions) -> ProviderCost:
    """One provider's price for a request of the measured lengths, its monthly bill for the traffic, and where
    self-hosting crosses it (over a throughput interval: at its high end and its low end)."""
    usd_per_request = request_price(row, mean_input_tokens, mean_output_tokens, assumptions.cache_hit_rate,
                                    assumptions.uses_batch_api)

    def crossover_at(request_per_s: float) -> Crossover:
        return crossover(request_per_s, mean_input_tokens, mean_output_tokens, assumptions, usd_per_request)

    cross = crossover_at(point.request_per_s) if point and mean_input_tokens + mean_output_tokens > 0 else None
    cross_range = None
    if cross is not None and point is not None and point.request_per_s_range is not None:
        low, high = point.request_per_s_range
        cross_range = (crossover_at(high).monthly_tokens, crossover_at(low).monthly_tokens if low > 0 else None)
    return ProviderCost(
        id=row.id, model=row.model, model_name=row.model_name or row.model, open_weights=row.open_weights,
        is_secondary=is_secondary, quantization=row.quantization, usd_per_request=usd_per_request,
        usd_per_m_tokens=blended_usd_per_m_tokens(usd_per_request, mean_input_tokens, mean_output_tokens),
        monthly_usd=fleet.requests_per_month * usd_per_request if fleet else None,
        break_even_utilization=break_even_utilization(self_usd_per_request, usd_per_request), crossover=cross,
        crossover_range=cross_range)


def _no_point_reason(level_costs: tuple[LevelCost, ...]) -> str:
    """Why no level is the operating point: each level's SLO problems."""
    if not level_costs:
        return "no level was measured"
    lowest, *higher = sorted(level_costs, key=lambda cost: cost.load)
    passed = [cost.label for cost in higher if not cost.slo_problems]
    if passed:
        return (f"the lowest level {lowest.label} does not meet the SLO ({', '.join(lowest.slo_problems)}); "
                f"{', '.join(passed)} above it did, but a load counts only when every lower one meets the SLO too "
                "(noise or a warm-up effect: measure again)")
    return "no measured level meets the SLO: " + "; ".join(f"{cost.label}: {', '.join(cost.slo_problems)}"
                                                           for cost in level_costs)


def _warnings(engine: EngineLevels, point: OperatingPoint | None, pricing: ResolvedPricing,
              mean_input_tokens: float, mean_output_tokens: float) -> list[str]:
    """What the measurements leave doubtful: levels that are not valid measurements, an SLO that held at the
    highest load measured, a workload of another input share than the traffic's, a level too short to count
    its requests."""
    warnings = [f"{engine.engine} {level.label}: {level.why_invalid}; the level is not used for the operating point"
                for level in engine.levels if not level.is_valid]
    if point is not None and point.next_failing is None and point.kind != "given" and engine.capacity is None:
        warnings.append(f"{engine.engine}: the SLO held at the highest measured level ({point.level}); its "
                        "capacity may be higher, so the self-hosted cost may be lower: measure more load "
                        "(`bench capacity` finds it)")
    share, tokens_per_request = pricing.input_share, mean_input_tokens + mean_output_tokens
    measured_share = mean_input_tokens / tokens_per_request if tokens_per_request > 0 else None
    if share is not None and measured_share is not None and abs(share - measured_share) > MIX_MISMATCH:
        warnings.append(f"the traffic is {share:.0%} input tokens but the measured workload was "
                        f"{measured_share:.0%}: measure with the traffic's prompt and answer lengths")
    point_level = next((level for level in (*engine.levels, engine.capacity)
                        if level and point and level.label == point.level), None)
    if point_level and point_level.summary_request_per_s and point_level.request_per_s > 0:
        gap = abs(point_level.summary_request_per_s / point_level.request_per_s - 1)
        if gap > RATE_MISMATCH:
            warnings.append(f"{engine.engine} {point_level.label}: requests ending in the steady window give "
                            f"{point_level.summary_request_per_s:.2f} req/s, tokens give "
                            f"{point_level.request_per_s:.2f}: the level is too short to count requests; run "
                            "longer levels")
    return warnings
