"""The crossover volume: a step function of volume, found where the provider's line meets the fleet's step.

Fixture as in test_fleet: R* = 10 req/s, 300 + 100 tokens, $2.00/GPU-h, u = 0.8, one spare, $1,000/month of
operations, 730 h. The provider charges $0.20 / $0.60 per 1M input / output tokens:
a = (300 * 0.20 + 100 * 0.60) / 1e6 = $0.00012 per request, b = 120 / 400 = $0.30 per 1M tokens.
C_req = 2.00 / (3600 * 10) = $0.0000556, so rho = C_req / a = 0.463.
"""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.fleet import crossover, fleet_for
from costmodel.types import Assumptions

R, ISL, OSL, A_REQ = 10.0, 300, 100, 0.00012


def assumptions(**changes: object) -> Assumptions:
    return Assumptions(**{"gpu_usd_per_hour": 2.0, "ops_usd_per_month": 1000.0, **changes})  # type: ignore[arg-type]


def test_crossover_by_hand_with_the_step_function() -> None:
    cross = crossover(R, ISL, OSL, assumptions(peak_to_average=1.5), A_REQ)
    # U_max = 0.8 / 1.5 = 0.533 > rho = 0.463: a crossover exists.
    assert cross.break_even_utilization == pytest.approx(0.462963, rel=1e-5)
    assert cross.max_utilization == pytest.approx(0.533333, rel=1e-5)
    # Vcap(m) = m * 0.8 * 10 / 1.5 * 3600 * 730 * 400 = m * 5,606,400,000 tokens
    # V(m) = ((m + 1) * 2.00 * 730 + 1,000) * 1e6 / 0.30 = m * 4,866,666,667 + 8,200,000,000
    # m = 11: V = 61,733,333,333 > Vcap = 61,670,400,000;  m = 12: V = 66,600,000,000 <= 67,276,800,000
    assert cross.serving_replicas == 12
    # crossover at max(V(12), Vcap(11)) = 66,600,000,000 tokens/month; check: provider 66.6e9 * 0.30 / 1e6
    # = $19,980.00; fleet 13 replicas * 2.00 * 730 + 1,000 = $19,980.00
    assert cross.monthly_tokens == pytest.approx(66.6e9)
    fleet = fleet_for(66.6e9, R, ISL, OSL, assumptions(peak_to_average=1.5))
    assert round(fleet.monthly_usd, 2) == 19980.00 == round(66.6e9 * 0.30 / 1e6, 2)


def test_above_the_crossover_the_self_hosted_cost_is_a_sawtooth() -> None:
    a = assumptions(peak_to_average=1.5)
    cross = crossover(R, ISL, OSL, a, A_REQ)
    # Just past Vcap(12) = 67,276,800,000 a 13th serving replica is needed: 14 * 1,460 + 1,000 = $21,440,
    # while the provider charges 67.28e9 * 0.30 / 1e6 = $20,183: the provider is cheaper again there.
    above_jump = 67_277_000_000.0
    assert fleet_for(above_jump, R, ISL, OSL, a).monthly_usd > above_jump * 0.30 / 1e6
    # From m_all = ceil((8.2e9 + 5.6064e9) / (5.6064e9 - 4.8667e9)) = 19 on, each step starts below the
    # provider's line; step 18 is cheaper from V(18) = 95,800,000,000 to its end: cheaper for good above it.
    assert cross.stays_cheaper_above == pytest.approx(95.8e9)
    volumes = np.linspace(cross.stays_cheaper_above, 5 * cross.stays_cheaper_above, 4001)
    assert all(fleet_for(v, R, ISL, OSL, a).monthly_usd <= v * 0.30 / 1e6 + 1e-6 for v in volumes)
    just_below = np.linspace(cross.monthly_tokens, cross.stays_cheaper_above, 4001)[:-1]
    assert any(fleet_for(v, R, ISL, OSL, a).monthly_usd > v * 0.30 / 1e6 for v in just_below)


def test_the_crossover_is_the_first_volume_where_self_hosting_is_cheaper_brute_force() -> None:
    a = assumptions(peak_to_average=1.5)
    cross = crossover(R, ISL, OSL, a, A_REQ)
    volumes = np.linspace(1e9, cross.monthly_tokens, 20001)[:-1]
    assert all(fleet_for(v, R, ISL, OSL, a).monthly_usd > v * 0.30 / 1e6 for v in volumes)


def test_no_crossover_when_the_peak_keeps_the_fleet_too_empty() -> None:
    cross = crossover(R, ISL, OSL, assumptions(peak_to_average=2.0), A_REQ)
    # U_max = 0.8 / 2 = 0.40 < rho = 0.463: never, at any volume
    assert cross.monthly_tokens is None and cross.serving_replicas is None
    assert cross.reason == ("self-hosting breaks even only at 46% average utilization, but with replicas planned to "
                            "run at 80% of their measured capacity at the peak (2x the average) and 730 of 730 billed "
                            "hours used, a fleet is at most 40% busy on average: no crossover at any volume")


def test_no_crossover_when_even_an_autoscaled_fleet_is_too_empty_says_the_plan() -> None:
    # $3.60/GPU-h: C_req = 3.60 / 36,000 = $0.0001, rho = 0.0001 / 0.00012 = 0.833 > U_max = u = 0.8 (autoscaled:
    # each hour gets the replicas it needs, so only the planned share of capacity is left unused)
    profile = (1.0,) * 12 + (3.0,) * 12
    cross = crossover(R, ISL, OSL, assumptions(gpu_usd_per_hour=3.6, hourly_profile=profile), A_REQ)
    assert cross.monthly_tokens is None
    assert cross.reason == ("self-hosting breaks even only at 83% average utilization, but with replicas planned to "
                            "run at 80% of their measured capacity in each hour of the profile (autoscaled), a fleet "
                            "is at most 80% busy on average: no crossover at any volume")
    assert "headroom" not in cross.reason  # 80% is the share used, not the share kept spare


def test_no_crossover_when_a_busy_replica_already_costs_more_than_the_provider() -> None:
    cross = crossover(R, ISL, OSL, assumptions(gpu_usd_per_hour=5.0), A_REQ)
    # C_req = 5.00 / 36,000 = $0.000139 > a = $0.00012: rho = 1.157
    assert cross.monthly_tokens is None and "1.16x the provider's price" in cross.reason


def test_a_free_provider_never_crosses_and_a_free_gpu_always_does() -> None:
    free_api = crossover(R, ISL, OSL, assumptions(peak_to_average=1.0), 0.0)
    assert free_api.monthly_tokens is None and "charges nothing" in free_api.reason
    free_gpu = crossover(R, ISL, OSL, assumptions(gpu_usd_per_hour=0.0, ops_usd_per_month=0.0), A_REQ)
    assert free_gpu.monthly_tokens == 0.0 and "any volume" in free_gpu.reason
    # Free GPUs but $1,000/month of operations: cheaper above 1,000 * 1e6 / 0.30 = 3,333,333,333 tokens
    ops_only = crossover(R, ISL, OSL, assumptions(gpu_usd_per_hour=0.0), A_REQ)
    assert ops_only.monthly_tokens == pytest.approx(1000 * 1e6 / 0.30)


def test_crossover_within_the_first_replica_starts_from_zero() -> None:
    # No spare, no operations: V(1) = 2.00 * 730 * 1e6 / 0.30 = 4,866,666,667 <= Vcap(1) = 5,606,400,000
    cross = crossover(R, ISL, OSL, assumptions(peak_to_average=1.5, spare_replicas=0, ops_usd_per_month=0.0), A_REQ)
    assert cross.serving_replicas == 1 and cross.monthly_tokens == pytest.approx(2.0 * 730 * 1e6 / 0.30)


def test_a_flat_autoscaled_profile_crosses_where_the_closed_form_does() -> None:
    # 12 open hours of equal weight, 30 days: H_op = 360, PAR = 1, each open hour needs ceil(V / 4,147,200,000)
    # replicas: C(n) = 2.00 * (30 * 12 * n + 1 * 360) + 1,000 = 720 n + 1,720;
    # V(n) = (720 n + 1,720) / 0.30 * 1e6 <= n * 4,147,200,000  ->  n >= 3.28 -> n = 4,
    # V(4) = 4,600 / 0.30 * 1e6 = 15,333,333,333 tokens (provider and fleet both $4,600.00)
    flat = (1.0,) * 12 + (0.0,) * 12
    stepped = crossover(R, ISL, OSL, assumptions(hourly_profile=flat, days_per_month=30,
                                                 billed_hours_per_month=360), A_REQ)
    closed = crossover(R, ISL, OSL, assumptions(peak_to_average=1.0, operating_hours_per_month=360,
                                                billed_hours_per_month=360), A_REQ)
    assert stepped.monthly_tokens == pytest.approx(4600 / 0.30 * 1e6)
    assert closed.monthly_tokens == pytest.approx(stepped.monthly_tokens)
    assert stepped.serving_replicas == closed.serving_replicas == 4


def test_autoscaling_by_the_hour_crosses_no_later_than_sizing_for_the_peak() -> None:
    profile = tuple([0.2] * 7 + [1.0] * 3 + [2.0] * 8 + [1.0] * 4 + [0.4] * 2)
    auto = assumptions(hourly_profile=profile)
    peak = assumptions(hourly_profile=profile, autoscale=False)
    a_req = 0.00020
    auto_cross, peak_cross = crossover(R, ISL, OSL, auto, a_req), crossover(R, ISL, OSL, peak, a_req)
    assert auto_cross.monthly_tokens is not None and peak_cross.monthly_tokens is not None
    assert auto_cross.monthly_tokens <= peak_cross.monthly_tokens
    # and it is a real crossing: the autoscaled fleet costs what the provider charges there
    v = auto_cross.monthly_tokens
    assert fleet_for(v, R, ISL, OSL, auto).monthly_usd == pytest.approx(v * a_req / 400 * 1e6 / 1e6, rel=1e-9)
