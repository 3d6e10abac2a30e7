"""Fleet size and monthly cost (COSTMODEL.md, "Fleet and monthly cost"), worked out by hand.

The fixture: R* = 10 requests/s per replica of 300 input + 100 output tokens, one GPU per replica at
$2.00/h, each replica planned at u = 0.8 of its capacity (it takes on 8 requests/s), one spare, $1,000/month
of operations.
"""

from __future__ import annotations

import pytest

from costmodel.fleet import fleet_for
from costmodel.types import Assumptions

R, ISL, OSL = 10.0, 300, 100
BASE = Assumptions(gpu_usd_per_hour=2.0, peak_to_average=2.0, ops_usd_per_month=1000)


def test_fleet_for_3_billion_tokens_a_month_by_hand() -> None:
    fleet = fleet_for(3e9, R, ISL, OSL, BASE)
    # N = 3e9 / 400 = 7,500,000 requests; lambda_avg = N / (3600 * 730) = 2.853881 req/s
    assert fleet.requests_per_month == 7_500_000
    assert fleet.average_request_per_s == pytest.approx(2.853881, rel=1e-6)
    # lambda_peak = 2 * 2.853881 = 5.707763; n_serve = ceil(5.707763 / 8) = ceil(0.713) = 1; + 1 spare
    assert fleet.peak_request_per_s == pytest.approx(5.707763, rel=1e-6)
    assert (fleet.serving_replicas, fleet.total_replicas, fleet.gpus) == (1, 2, 2)
    # C_self = n * P * H_bill + C_ops = 2 * 2.00 * 730 + 1,000 = $3,920.00
    assert round(fleet.gpu_usd_per_month, 2) == 2920.00
    assert round(fleet.monthly_usd, 2) == 3920.00
    # U_eff = N / (n * R* * 3600 * H_bill) = 7.5e6 / (2 * 10 * 3600 * 730) = 7.5e6 / 52,560,000 = 14.27 %
    assert fleet.utilization == pytest.approx(0.142694, rel=1e-5)


def test_fleet_for_30_billion_tokens_a_month_by_hand() -> None:
    fleet = fleet_for(30e9, R, ISL, OSL, BASE)
    # N = 75,000,000; lambda_peak = 2 * 75e6 / 2,628,000 = 57.0776; / 8 = 7.13 -> 8 serving + 1 spare = 9
    assert (fleet.serving_replicas, fleet.total_replicas) == (8, 9)
    # 9 * 2.00 * 730 + 1,000 = 13,140 + 1,000 = $14,140.00
    assert round(fleet.monthly_usd, 2) == 14140.00


def test_gpus_per_replica_multiply_the_gpus_and_the_price() -> None:
    two = Assumptions(gpu_usd_per_hour=2.0, gpus_per_replica=2, peak_to_average=2.0, ops_usd_per_month=1000)
    fleet = fleet_for(3e9, R, ISL, OSL, two)
    # P = 2 * 2.00 = $4.00/replica-hour: 2 replicas * 4.00 * 730 + 1,000 = $6,840.00 on 4 GPUs
    assert fleet.gpus == 4 and round(fleet.monthly_usd, 2) == 6840.00


def test_min_serving_replicas_hold_even_without_traffic() -> None:
    a = Assumptions(gpu_usd_per_hour=2.0, min_serving_replicas=2, spare_replicas=0)
    fleet = fleet_for(0.0, R, ISL, OSL, a)
    assert fleet.serving_replicas == 2 and fleet.utilization == 0.0
    assert round(fleet.monthly_usd, 2) == 2 * 2.0 * 730


def test_exact_capacity_does_not_round_up_to_an_extra_replica() -> None:
    # A peak of exactly 8 requests/s at u * R = 8 needs one replica, not two (float noise must not add one).
    n = 8 / 2.0 * 3600 * 730  # requests a month whose peak (PAR 2) is 8 requests/s
    fleet = fleet_for(n * 400, R, ISL, OSL, BASE)
    assert fleet.serving_replicas == 1


def test_hourly_profile_sizes_each_hour_and_keeps_the_spare_on() -> None:
    # 12 quiet hours (weight 1) and 12 busy hours (weight 3), 30 days: shares 1/48 and 3/48 of the month.
    a = Assumptions(gpu_usd_per_hour=2.0, hourly_profile=(1.0,) * 12 + (3.0,) * 12, days_per_month=30,
                    billed_hours_per_month=720)
    fleet = fleet_for(30e9, R, ISL, OSL, a)
    # N = 75e6; quiet hour: 75e6 / 48 / (30 * 3600) = 14.468 req/s -> ceil(14.468 / 8) = 2 replicas;
    # busy hour: 3 * 14.468 = 43.403 req/s -> ceil(5.43) = 6 replicas
    assert fleet.hourly_serving_replicas == (2,) * 12 + (6,) * 12
    # replica-hours = 30 * (12 * 2 + 12 * 6) + 1 spare * 720 = 2,880 + 720 = 3,600; * $2.00 = $7,200.00
    assert fleet.replica_hours_per_month == pytest.approx(3600)
    assert round(fleet.monthly_usd, 2) == 7200.00
    # U_eff = 75e6 / (3,600 replica-hours * 10 req/s * 3600 s) = 75e6 / 129.6e6 = 57.87 %
    assert fleet.utilization == pytest.approx(0.5787037, rel=1e-6)
    assert a.peak_ratio == pytest.approx(1.5) and a.hours_of_operation == 720  # 3 * 24 / 48; 30 * 24


def test_reserved_gpus_with_a_profile_are_sized_for_the_peak_all_month() -> None:
    a = Assumptions(gpu_usd_per_hour=2.0, hourly_profile=(1.0,) * 12 + (3.0,) * 12, days_per_month=30,
                    billed_hours_per_month=730, autoscale=False)
    fleet = fleet_for(30e9, R, ISL, OSL, a)
    # PAR = 1.5, H_op = 720: lambda_peak = 1.5 * 75e6 / (3600 * 720) = 43.403 -> 6 serving + 1 spare,
    # billed 730 h: 7 * 2.00 * 730 = $10,220.00
    assert fleet.serving_replicas == 6 and round(fleet.monthly_usd, 2) == 10220.00


def test_fewer_hours_of_operation_need_more_replicas_for_the_same_volume() -> None:
    always = fleet_for(30e9, R, ISL, OSL, BASE)
    office = fleet_for(30e9, R, ISL, OSL, Assumptions(gpu_usd_per_hour=2.0, operating_hours_per_month=260,
                                                       billed_hours_per_month=260, ops_usd_per_month=1000))
    assert office.serving_replicas > always.serving_replicas
