"""Owning the hardware: what a server costs a month, the fleet of whole servers a traffic needs, and how it
compares with renting GPUs and with paying per token.

A server's month is its purchase less its residual value spread over its life, its hosting, and the energy
it draws at the wall: (GPUs x power per GPU + the server's overhead) x PUE x 730 h x the price of a kWh.
The power per GPU is the draw measured at the operating load when the GPUs were read, else the board power
(an upper bound). Owned hardware runs all month and does not scale to zero, so the fleet is sized for the
peak like an always-on rented one, then rounded up to whole servers. Every cost is a step function of the
volume; the crossovers are found on those steps (a fine geometric grid, then bisection to the edge).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from costmodel.fleet import fleet_for
from costmodel.inputs import HOURS_PER_MONTH, Owned
from costmodel.model import PER_MILLION, cost_per
from costmodel.types import (
    Assumptions,
    CostResult,
    OwnedComparison,
    OwnedFleet,
    OwnedServerCost,
    ProviderCost,
    SensitivityRow,
    Variation,
)

MONTHS_PER_YEAR = 12
SEARCH_TOKENS = (1e6, 1e15)  # the monthly volumes a crossover is looked for in
GRID_POINTS = 1500
BISECTIONS = 80


def server_month(owned: Owned, power_w_per_gpu: float, power_source: str,
                 hours_per_month: float = HOURS_PER_MONTH) -> OwnedServerCost:
    """One server's month: its purchase as a monthly payment, hosting, maintenance, and the energy it draws in
    the hours it is operated."""
    it_kw = (owned.gpus_per_server * power_w_per_gpu + owned.server_overhead_w) / 1000
    kwh = it_kw * owned.pue * hours_per_month
    return OwnedServerCost(capex_usd=monthly_capex(owned), hosting_usd=owned.hosting_usd_per_server_month,
                           energy_usd=kwh * owned.usd_per_kwh, energy_kwh=kwh, power_w_per_gpu=power_w_per_gpu,
                           power_source=power_source,
                           maintenance_usd=owned.server_usd * owned.maintenance_share_per_year / MONTHS_PER_YEAR)


def monthly_capex(owned: Owned) -> float:
    """The purchase less its residual value over the months of its life: straight-line without a cost of capital;
    with one (annual rate r, i = r / 12 a month, n months), the annuity that repays the price less the residual's
    present value: (P - R / (1 + i)^n) x i / (1 - (1 + i)^-n)."""
    months = owned.amortization_years * MONTHS_PER_YEAR
    price, residual = owned.server_usd, owned.server_usd * owned.residual_share
    rate = owned.cost_of_capital / MONTHS_PER_YEAR
    if rate == 0:
        return (price - residual) / months
    return (price - residual / (1 + rate) ** months) * rate / (1 - (1 + rate) ** -months)


def usd_per_gpu_hour(owned: Owned, server: OwnedServerCost, hours_per_month: float = HOURS_PER_MONTH) -> float:
    """One GPU of a server for an hour it is operated: the server's month over its GPU-hours."""
    return server.total_usd / (owned.gpus_per_server * hours_per_month)


def owned_fleet(monthly_tokens: float, request_per_s: float, isl: float, osl: float,
                assumptions: Assumptions, owned: Owned, server: OwnedServerCost) -> OwnedFleet:
    always_on = replace(assumptions, autoscale=False, billed_hours_per_month=HOURS_PER_MONTH)
    plan = fleet_for(monthly_tokens, request_per_s, isl, osl, always_on)
    gpus = plan.total_replicas * assumptions.gpus_per_replica
    servers = math.ceil(gpus / owned.gpus_per_server)
    return OwnedFleet(monthly_tokens=monthly_tokens, replicas=plan.total_replicas, gpus_used=gpus, servers=servers,
                      server=server, ops_usd_per_month=assumptions.ops_usd_per_month,
                      monthly_usd=servers * server.total_usd + assumptions.ops_usd_per_month,
                      purchase_usd=servers * owned.server_usd)


def first_cheaper(cost: Callable[[float], float], other: Callable[[float], float],
                  span: tuple[float, float] = SEARCH_TOKENS) -> float | None:
    """The lowest monthly volume at which `cost` is at most `other` (both step functions of volume); None
    when it never is within `span`."""
    low, high = span
    previous = None
    for i in range(GRID_POINTS + 1):
        volume = low * (high / low) ** (i / GRID_POINTS)
        if cost(volume) <= other(volume):
            if previous is None:
                return volume
            return _edge(cost, other, previous, volume)
        previous = volume
    return None


def _edge(cost: Callable[[float], float], other: Callable[[float], float], above: float, below: float) -> float:
    """Bisect (above: `cost` dearer, below: cheaper) down to the step where it turns."""
    for _ in range(BISECTIONS):
        middle = (above + below) / 2
        if cost(middle) <= other(middle):
            below = middle
        else:
            above = middle
    return below


def payback_months(fleet: OwnedFleet, alternative_usd_per_month: float | None,
                   residual_share: float = 0.0) -> float | None:
    """Months until the purchase, less the residual value it is sold for at the end, is paid back by what
    owning saves each month on the alternative (the running costs, hosting, energy and operations, counted;
    the purchase itself not)."""
    if alternative_usd_per_month is None:
        return None
    running = fleet.monthly_usd - fleet.servers * fleet.server.capex_usd
    saving = alternative_usd_per_month - running
    return fleet.purchase_usd * (1 - residual_share) / saving if saving > 0 else None


def compare_owned(best: CostResult, compared: ProviderCost | None, assumptions: Assumptions,
                  monthly_tokens: float | None, owned: Owned, power: tuple[float, str]) -> OwnedComparison | None:
    """Own vs rent vs the compared provider for the engine that sets the self-hosted cost; None without an
    operating point to size a fleet from."""
    point = best.operating_point
    if point is None or best.isl + best.osl <= 0:
        return None
    request_per_s, isl, osl = point.request_per_s, best.isl, best.osl
    hours = assumptions.hours_of_operation
    server = server_month(owned, *power, hours)

    def own(volume: float, o: Owned = owned, s: OwnedServerCost = server) -> float:
        return owned_fleet(volume, request_per_s, isl, osl, assumptions, o, s).monthly_usd

    def rent(volume: float) -> float:
        return fleet_for(volume, request_per_s, isl, osl, assumptions).monthly_usd

    def api(volume: float) -> float:
        return volume / (isl + osl) * compared.usd_per_request if compared else math.inf

    fleet = owned_fleet(monthly_tokens, request_per_s, isl, osl, assumptions, owned, server) if monthly_tokens else None
    gpu_hour = usd_per_gpu_hour(owned, server, hours)
    per_request = cost_per(gpu_hour * assumptions.gpus_per_replica, request_per_s)
    rent_usd = rent(monthly_tokens) if monthly_tokens else None
    api_usd = api(monthly_tokens) if monthly_tokens and compared else None
    rows = _sensitivity(owned, power, monthly_tokens, own, rent, api, server, hours) if monthly_tokens else ()
    return OwnedComparison(
        usd_per_gpu_hour=gpu_hour, server=server, fleet=fleet, rent_monthly_usd=rent_usd,
        provider_id=compared.id if compared else None, provider_monthly_usd=api_usd,
        own_beats_rent_above=first_cheaper(own, rent),
        own_beats_provider_above=first_cheaper(own, api) if compared else None,
        payback_months_vs_rent=payback_months(fleet, rent_usd, owned.residual_share) if fleet else None,
        payback_months_vs_provider=payback_months(fleet, api_usd, owned.residual_share) if fleet else None,
        life_months=owned.amortization_years * MONTHS_PER_YEAR,
        sensitivity=rows, notes=_notes(owned, server, assumptions),
        joules_per_output_token=server.power_w_per_gpu * assumptions.gpus_per_replica / point.output_tokens_per_s
        if point.output_tokens_per_s > 0 else None,
        usd_per_request=per_request, usd_per_m_tokens=per_request * PER_MILLION / (isl + osl) if per_request else None,
        usd_per_m_output_tokens=cost_per(gpu_hour * assumptions.gpus_per_replica, point.output_tokens_per_s,
                                         PER_MILLION),
        to_rent_ratio=gpu_hour / assumptions.gpu_usd_per_hour if assumptions.gpu_usd_per_hour > 0 else None)


def _sensitivity(owned: Owned, power: tuple[float, str], volume: float, own: Callable[..., float],
                 rent: Callable[[float], float], api: Callable[[float], float],
                 server: OwnedServerCost, hours: float = HOURS_PER_MONTH) -> tuple[SensitivityRow, ...]:
    """Owning's monthly cost against the cheaper alternative when electricity, utilization (the traffic on
    the same hardware) or the years of amortization change."""

    def variation(label: str, o: Owned, v: float = volume) -> Variation:
        s = server_month(o, *power, hours)
        return Variation(label=label, self_host_usd_per_month=own(v, o, s), provider_usd_per_month=min(rent(v), api(v)),
                         crossover_tokens=first_cheaper(lambda x: own(x, o, s), api))

    price = owned.usd_per_kwh
    years = owned.amortization_years
    return (
        SensitivityRow("Electricity price", f"${price:g}/kWh",
                       tuple(variation(f"${p:.3g}/kWh", owned.model_copy(update={"usd_per_kwh": p}))
                             for p in (price / 2, price * 2))),
        SensitivityRow("Utilization (traffic on the same fleet)", "the traffic given",
                       tuple(variation(f"x{f:g} the traffic", owned, volume * f) for f in (0.5, 2.0))),
        SensitivityRow("Amortization", f"{years:g} years",
                       tuple(variation(f"{y:g} years", owned.model_copy(update={"amortization_years": y}))
                             for y in (3.0, 5.0) if y != years)),
    )


def _notes(owned: Owned, server: OwnedServerCost, assumptions: Assumptions) -> tuple[str, ...]:
    notes = [f"power: {server.power_w_per_gpu:,.0f} W per GPU, {server.power_source}, billed for the "
             f"{assumptions.hours_of_operation:,.0f} h/month operated",
             f"a server: {owned.gpus_per_server} GPUs, bought for ${owned.server_usd:,.0f}, amortized over "
             f"{owned.amortization_years:g} years to {owned.residual_share:.0%} residual value; PUE {owned.pue:g} "
             f"at ${owned.usd_per_kwh:g}/kWh; hosting ${owned.hosting_usd_per_server_month:,.0f}/month",
             f"cost of capital {owned.cost_of_capital:.1%} a year"
             + (" (cost_of_capital: the purchase then is an annuity)" if not owned.cost_of_capital
                else ": the purchase paid as an annuity over its life")
             + f"; maintenance {owned.maintenance_share_per_year:.1%} of the price a year"
             + (" (maintenance_share_per_year)" if not owned.maintenance_share_per_year else ""),
             "the servers run all month: sized for the peak, whole servers, no scaling to zero"]
    if assumptions.gpus_per_replica > owned.gpus_per_server:
        notes.append(f"a replica needs {assumptions.gpus_per_replica} GPUs, more than one server holds: it spans "
                     "servers")
    return tuple(notes)
