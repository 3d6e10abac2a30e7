"""From the operating point to money: the fleet a traffic needs, its monthly cost, and the crossover volume.

Pure functions (COSTMODEL.md, "Fleet and monthly cost" and "Crossover"). A fleet is sized for the peak:
`n_serve = max(min_serving, ceil(lambda_peak / (u * R*)))` replicas plus spares, billed `H_bill` hours.
With an hourly profile, each hour of the day gets the replicas it needs (an autoscaled lower bound) and
the spares stay on. The self-hosted cost is therefore a step function of volume, and so is the crossover.
"""

from __future__ import annotations

import heapq
import math

from costmodel.model import PER_MILLION, SECONDS_PER_HOUR, blended_usd_per_m_tokens, cost_per
from costmodel.types import Assumptions, Crossover, FleetPlan

MAX_CROSSOVER_STEPS = 1_000_000
_TOLERANCE = 1e-9


def _ceil(x: float) -> int:
    """ceil that does not turn 2.0000000000000004 (float noise) into 3."""
    return math.ceil(x - _TOLERANCE * max(1.0, abs(x)))


def fleet_for(monthly_tokens: float, request_per_s: float, isl: float, osl: float,
              assumptions: Assumptions) -> FleetPlan:
    """The fleet and its monthly cost for `monthly_tokens` (input + output) at R* = `request_per_s`."""
    if request_per_s <= 0 or isl + osl <= 0:
        raise ValueError("a fleet needs a throughput > 0 at the operating point and requests of > 0 tokens")
    requests_per_month = monthly_tokens / (isl + osl)
    capacity = assumptions.headroom * request_per_s  # requests/s one replica is planned to take on
    average = requests_per_month / (SECONDS_PER_HOUR * assumptions.hours_of_operation)
    peak = assumptions.peak_ratio * average
    profile, spares = assumptions.hourly_profile, assumptions.spare_replicas
    billed_hours = assumptions.billed_hours_per_month
    hourly: tuple[int, ...] = ()
    if assumptions.is_autoscaled:
        total = sum(profile)
        per_hour = [requests_per_month * w / total / (assumptions.days_per_month * SECONDS_PER_HOUR) for w in profile]
        hourly = tuple(max(assumptions.min_serving_replicas, _ceil(rate / capacity)) if w > 0 else 0
                       for rate, w in zip(per_hour, profile, strict=True))
        serving = max(hourly)
        replica_hours = assumptions.days_per_month * sum(hourly) + spares * billed_hours
    else:
        serving = max(assumptions.min_serving_replicas, _ceil(peak / capacity))
        replica_hours = (serving + spares) * billed_hours
    gpu_usd = replica_hours * assumptions.replica_usd_per_hour
    return FleetPlan(
        monthly_tokens=monthly_tokens, requests_per_month=requests_per_month, average_request_per_s=average,
        peak_request_per_s=peak, serving_replicas=serving, spare_replicas=spares, total_replicas=serving + spares,
        gpus=(serving + spares) * assumptions.gpus_per_replica, replica_hours_per_month=replica_hours,
        gpu_usd_per_month=gpu_usd, ops_usd_per_month=assumptions.ops_usd_per_month,
        monthly_usd=gpu_usd + assumptions.ops_usd_per_month,
        utilization=requests_per_month / (replica_hours * request_per_s * SECONDS_PER_HOUR) if replica_hours > 0
        else 0.0,
        hourly_serving_replicas=hourly,
    )


def crossover(request_per_s: float, isl: float, osl: float, assumptions: Assumptions,
              provider_usd_per_request: float) -> Crossover:
    """The lowest monthly volume (input + output tokens) above which the fleet costs less than the provider."""
    usd_per_request = cost_per(assumptions.replica_usd_per_hour, request_per_s)
    assert usd_per_request is not None, "crossover needs a throughput > 0"
    u_max = assumptions.max_utilization
    if provider_usd_per_request <= 0:
        return Crossover(monthly_tokens=None, serving_replicas=None, break_even_utilization=None,
                         max_utilization=u_max, reason="the provider charges nothing for these requests")
    rho = usd_per_request / provider_usd_per_request
    if assumptions.replica_usd_per_hour == 0 and assumptions.ops_usd_per_month == 0:
        return Crossover(monthly_tokens=0.0, serving_replicas=assumptions.min_serving_replicas,
                         break_even_utilization=rho, max_utilization=u_max,
                         reason="self-hosting costs nothing here (GPU price 0, no operations cost): cheaper at any "
                         "volume")
    if rho >= u_max:
        return Crossover(monthly_tokens=None, serving_replicas=None, break_even_utilization=rho,
                         max_utilization=u_max, reason=_never_reason(rho, u_max, assumptions))
    provider_usd_per_m_tokens = blended_usd_per_m_tokens(provider_usd_per_request, isl, osl)
    if assumptions.is_autoscaled:
        return _stepped_crossover(request_per_s, isl, osl, assumptions, provider_usd_per_m_tokens, rho)
    return _closed_form_crossover(request_per_s, isl, osl, assumptions, provider_usd_per_m_tokens, rho)


def _never_reason(rho: float, u_max: float, assumptions: Assumptions) -> str:
    if rho >= 1:
        return (f"even 100% busy, a replica costs {rho:.2f}x the provider's price per request: "
                "self-hosting never wins at any volume")
    # `headroom` is the share of capacity a replica is planned to use (0.8), not the spare share (0.2): say the plan.
    planned = f"replicas planned to run at {assumptions.headroom:.0%} of their measured capacity"
    shape = (f"{planned} in each hour of the profile (autoscaled)" if assumptions.is_autoscaled else
             f"{planned} at the peak ({assumptions.peak_ratio:g}x the average) and "
             f"{assumptions.hours_of_operation:g} of {assumptions.billed_hours_per_month:g} billed hours used")
    return (f"self-hosting breaks even only at {rho:.0%} average utilization, but with {shape}, a fleet is "
            f"at most {u_max:.0%} busy on average: no crossover at any volume")


def _closed_form_crossover(request_per_s: float, isl: float, osl: float, assumptions: Assumptions,
                           provider_usd_per_m_tokens: float, rho: float) -> Crossover:
    """Step m = min_serving, ...: Vcap(m) = m*u*R*/PAR*3600*H_op*(ISL+OSL), V(m) = C_self(m)*1e6/b; the first
    m with V(m) <= Vcap(m) crosses over at max(V(m), Vcap(m-1)). Solved for m directly, then checked."""
    k_cap = (assumptions.headroom * request_per_s / assumptions.peak_ratio * SECONDS_PER_HOUR
             * assumptions.hours_of_operation * (isl + osl))  # tokens/month one serving replica carries
    per_replica = (assumptions.replica_usd_per_hour * assumptions.billed_hours_per_month * PER_MILLION
                   / provider_usd_per_m_tokens)  # tokens/month whose provider bill equals one replica's
    fixed = (assumptions.spare_replicas * per_replica
             + assumptions.ops_usd_per_month * PER_MILLION / provider_usd_per_m_tokens)

    def volume(m: int) -> float:
        return m * per_replica + fixed

    def crosses(m: int) -> bool:
        return volume(m) <= m * k_cap * (1 + _TOLERANCE)

    m = max(assumptions.min_serving_replicas, _ceil(fixed / (k_cap - per_replica)))
    while m > assumptions.min_serving_replicas and crosses(m - 1):
        m -= 1
    while not crosses(m):
        m += 1
    def lower(m: int) -> float:
        return 0.0 if m == assumptions.min_serving_replicas else (m - 1) * k_cap

    at = max(volume(m), lower(m))
    # Past the crossover the fleet's cost jumps at each Vcap(m), and the provider can be cheaper again just
    # above a jump; from m_all on, every step starts below the provider's line.
    m_all = max(m, _ceil((fixed + k_cap) / (k_cap - per_replica)))
    while m_all > m and volume(m_all - 1) <= lower(m_all - 1):
        m_all -= 1
    stays = max(volume(m_all - 1), lower(m_all - 1)) if m_all > m and crosses(m_all - 1) else lower(m_all)
    return Crossover(monthly_tokens=at, serving_replicas=m, break_even_utilization=rho,
                     max_utilization=assumptions.max_utilization,
                     reason=f"self-hosting is cheaper above this volume ({m} serving replica{'s' if m > 1 else ''} "
                     "at the peak)", stays_cheaper_above=max(at, stays))


def _stepped_crossover(request_per_s: float, isl: float, osl: float, assumptions: Assumptions,
                       provider_usd_per_m_tokens: float, rho: float) -> Crossover:
    """The autoscaled fleet: each open hour h needs max(min, ceil(V * q_h)) replicas, so the cost steps at
    V = n_h / q_h; walk the steps in order until the provider's line reaches the fleet's cost."""
    profile, days = assumptions.hourly_profile, assumptions.days_per_month
    total = sum(profile)
    per_token = 1 / ((isl + osl) * days * SECONDS_PER_HOUR * assumptions.headroom * request_per_s)
    q = {h: w / total * per_token for h, w in enumerate(profile) if w > 0}
    serving = dict.fromkeys(q, assumptions.min_serving_replicas)  # n_h: replicas serving hour h
    edges = [(serving[h] / q[h], h) for h in q]
    heapq.heapify(edges)
    lower = 0.0
    spare_hours = assumptions.spare_replicas * assumptions.billed_hours_per_month
    for _ in range(MAX_CROSSOVER_STEPS):
        upper = edges[0][0]
        usd_per_month = (assumptions.replica_usd_per_hour * (days * sum(serving.values()) + spare_hours)
                         + assumptions.ops_usd_per_month)
        at = usd_per_month * PER_MILLION / provider_usd_per_m_tokens
        if at <= upper * (1 + _TOLERANCE):
            return Crossover(monthly_tokens=max(at, lower), serving_replicas=max(serving.values()),
                             break_even_utilization=rho, max_utilization=assumptions.max_utilization,
                             reason="self-hosting is cheaper above this volume (autoscaled by the hour)")
        while edges[0][0] <= upper * (1 + _TOLERANCE):
            _, h = heapq.heappop(edges)
            serving[h] += 1
            heapq.heappush(edges, (serving[h] / q[h], h))
        lower = upper
    return Crossover(monthly_tokens=None, serving_replicas=None, break_even_utilization=rho,
                     max_utilization=assumptions.max_utilization,
                     reason=f"no crossover below {lower:.3g} tokens/month ({MAX_CROSSOVER_STEPS:,} fleet steps)")
