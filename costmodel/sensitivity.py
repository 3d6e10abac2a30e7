"""How much the answer depends on each assumption: change one at a time, recompute, and compare.

Each row varies one input over a plausible range (COSTMODEL.md, "Report it honestly"): GPU price (spot,
reserved, serverless, the on-demand range), throughput +-30 %, peak-to-average 1 to 3, hours of operation,
operations cost, the provider's price range, the prompt-cache hit rate. Each variation gives both monthly
costs at the traffic's volume (when known) and the crossover volume.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from common.units import usd, usd_rate
from costmodel.fleet import crossover, fleet_for
from costmodel.inputs import HOURS_PER_MONTH, bills_every_hour
from costmodel.model import request_price
from costmodel.prices import PriceCatalog, ProviderPrice
from costmodel.types import (
    Assumptions,
    CostResult,
    ProviderCost,
    ResolvedPricing,
    Sensitivity,
    SensitivityRow,
    Variation,
)

BUSINESS_HOURS_PER_MONTH = 12 * 5 * 52 / 12  # 12 hours a day, 5 days a week: 260
THROUGHPUT_RANGE = (0.7, 1.3)
PRICE_RANGE = (0.7, 1.3)


def sensitivity(best: CostResult, compared: ProviderCost, resolved: ResolvedPricing,
                catalog: PriceCatalog) -> Sensitivity | None:
    point = best.operating_point
    rows = {r.id: r for r in (*resolved.providers, *resolved.references)}
    if point is None or compared.id not in rows or best.isl + best.osl <= 0:
        return None
    base, base_request_per_s, base_price = resolved.assumptions, point.request_per_s, rows[compared.id]

    def run(label: str, assumptions: Assumptions = base, request_per_s: float = base_request_per_s,
            price: ProviderPrice = base_price) -> Variation:
        return outcome(label, request_per_s, best.isl, best.osl, assumptions, price, resolved.monthly_tokens)

    table = [
        SensitivityRow("GPU price", usd_rate(base.gpu_usd_per_hour) + "/GPU-h", _gpu_prices(resolved, catalog, run)),
        SensitivityRow("Throughput at the SLO", f"{base_request_per_s:.2f} req/s per replica",
                       tuple(run(f"{f - 1:+.0%}", request_per_s=base_request_per_s * f) for f in THROUGHPUT_RANGE)),
        SensitivityRow("Peak-to-average", f"{base.peak_ratio:.2g}",
                       tuple(run(f"{par:g}", assumptions=replace(base, hourly_profile=(), peak_to_average=par))
                             for par in (1.0, 3.0))),
        SensitivityRow("Operations cost", usd(base.ops_usd_per_month) + "/month", _ops(base, run)),
        SensitivityRow("Provider price", f"{compared.id}",
                       _provider_prices(base_price, resolved, run, best.isl, best.osl)),
        SensitivityRow("Prompt-cache hit rate", f"{base.cache_hit_rate:.0%}",
                       tuple(run(f"{h:.0%}", assumptions=replace(base, cache_hit_rate=h)) for h in (0.0, 0.5)
                             if h != base.cache_hit_rate)),
    ]
    if not base.hourly_profile:
        table.insert(3, SensitivityRow("Hours of operation", f"{base.hours_of_operation:g} h/month", _hours(base, run)))
    return Sensitivity(run("baseline"), tuple(row for row in table if row.variations))


def outcome(label: str, request_per_s: float, isl: float, osl: float, assumptions: Assumptions,
            price: ProviderPrice, monthly_tokens: float | None) -> Variation:
    """Both monthly costs at the traffic's volume (None without one) and the crossover, under one variation."""
    provider_usd_per_request = request_price(price, isl, osl, assumptions.cache_hit_rate,
                                             assumptions.uses_batch_api)
    cross = crossover(request_per_s, isl, osl, assumptions, provider_usd_per_request)
    if monthly_tokens is None:
        return Variation(label=label, self_host_usd_per_month=None, provider_usd_per_month=None,
                         crossover_tokens=cross.monthly_tokens)
    fleet = fleet_for(monthly_tokens, request_per_s, isl, osl, assumptions)
    return Variation(label=label, self_host_usd_per_month=fleet.monthly_usd,
                     provider_usd_per_month=fleet.requests_per_month * provider_usd_per_request,
                     crossover_tokens=cross.monthly_tokens)


Run = Callable[..., Variation]


def _gpu_prices(resolved: ResolvedPricing, catalog: PriceCatalog, run: Run) -> tuple[Variation, ...]:
    assumptions = resolved.assumptions
    if resolved.gpu is None:
        return tuple(run(f"{f - 1:+.0%}", assumptions=replace(assumptions,
                                                               gpu_usd_per_hour=assumptions.gpu_usd_per_hour * f))
                     for f in PRICE_RANGE)
    gpu = resolved.gpu.gpu
    picks = []
    for kind in ("spot", "reserved-1y", "reserved-3y", "reserved", "serverless"):
        picks += catalog.gpu_pool(gpu, kind)[:1]  # the cheapest default row of each other kind
    on_demand = catalog.gpu_pool(gpu, "on-demand")  # the rows the median is taken over
    picks += [on_demand[0], on_demand[-1]] if on_demand else []
    variations, seen = [], {resolved.gpu.id}
    for row in picks:
        if row.id in seen:
            continue
        seen.add(row.id)
        reserved = bills_every_hour(row.pricing)
        billed = HOURS_PER_MONTH if reserved else assumptions.hours_of_operation
        changed = replace(assumptions, gpu_usd_per_hour=row.usd_per_gpu_hour, billed_hours_per_month=billed,
                          autoscale=not reserved)
        variations.append(run(f"{row.cloud} {row.pricing} {usd(row.usd_per_gpu_hour)}", assumptions=changed))
    return tuple(variations)


def _hours(assumptions: Assumptions, run: Run) -> tuple[Variation, ...]:
    hours = BUSINESS_HOURS_PER_MONTH if assumptions.hours_of_operation >= HOURS_PER_MONTH else HOURS_PER_MONTH
    label = "business hours (12 h x 5 days)" if hours < HOURS_PER_MONTH else "always on (730 h)"
    billed = assumptions.billed_hours_per_month if not assumptions.autoscale else hours  # reserved: every hour
    return (run(label, assumptions=replace(assumptions, operating_hours_per_month=hours,
                                           billed_hours_per_month=billed)),)


def _ops(assumptions: Assumptions, run: Run) -> tuple[Variation, ...]:
    values = (0.0, 2 * assumptions.ops_usd_per_month) if assumptions.ops_usd_per_month > 0 else (2000.0, 10000.0)
    return tuple(run(usd(v) + "/month", assumptions=replace(assumptions, ops_usd_per_month=v)) for v in values)


def _provider_prices(base: ProviderPrice, resolved: ResolvedPricing, run: Run, isl: float,
                     osl: float) -> tuple[Variation, ...]:
    same = [r for r in resolved.providers if r.model == base.model and r.id != base.id]
    if not same:
        return tuple(run(f"{f - 1:+.0%}", price=_scaled(base, f)) for f in PRICE_RANGE)
    assumptions = resolved.assumptions

    def cost(row: ProviderPrice) -> float:
        return request_price(row, isl, osl, assumptions.cache_hit_rate, assumptions.uses_batch_api)

    ordered = sorted(same, key=cost)
    picks = {ordered[0].id: ordered[0], ordered[-1].id: ordered[-1]}
    return tuple(run(row.id, price=row) for row in picks.values())


def _scaled(row: ProviderPrice, factor: float) -> ProviderPrice:
    return row.model_copy(update={"usd_per_m_input": row.usd_per_m_input * factor,
                                  "usd_per_m_cached_input": row.cached_input * factor,
                                  "usd_per_m_output": row.usd_per_m_output * factor})
