"""Owned hardware, worked by hand to the cent.

The server: $200,000 with 8 GPUs, amortized over 4 years to nothing, $1,000/month of hosting, 700 W per GPU
plus 1,000 W for the rest of the box, PUE 1.3, $0.10/kWh.
- purchase spread over its life: 200,000 / 48 = $4,166.67 a month
- energy: (8 x 700 + 1,000) W = 6.6 kW at the rack x 1.3 x 730 h = 6,263.4 kWh -> $626.34
- the server's month: 4,166.67 + 1,000 + 626.34 = $5,793.01; per GPU-hour 5,793.01 / (8 x 730) = $0.99
The traffic: R* = 1 request/s per one-GPU replica, 800 + 200 tokens a request, no headroom, peak = average,
always on, no spare: one replica serves 1 x 3,600 x 730 x 1,000 = 2.628 B tokens a month.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest
from pydantic import ValidationError

from costmodel.decide import decide
from costmodel.fleet import fleet_for
from costmodel.inputs import Owned, Pricing, Requirements, Traffic
from costmodel.owned import first_cheaper, owned_fleet, payback_months, server_month, usd_per_gpu_hour
from costmodel.prices import load_catalog
from costmodel.types import (
    Assumptions,
    Decision,
    EngineLevels,
    LatencyLimits,
    MeasuredLevel,
    OwnedComparison,
)

OWNED = Owned(server_usd=200_000, gpus_per_server=8, amortization_years=4, hosting_usd_per_server_month=1000,
              server_overhead_w=1000, pue=1.3, usd_per_kwh=0.10)
RENTED = Assumptions(gpu_usd_per_hour=2.0, headroom=1.0, peak_to_average=1.0, spare_replicas=0, autoscale=False)
R, ISL, OSL = 1.0, 800, 200
PER_REPLICA = 2.628e9


def decided_with_owned(level: MeasuredLevel, monthly_tokens: float) -> Decision:
    """The whole decision for one measured level, renting at $2/GPU-h and owning OWNED."""
    return decide([EngineLevels("ref", (level,))], LatencyLimits(), Traffic(monthly_tokens=monthly_tokens),
                  Pricing(gpu="h100-sxm", gpu_usd_per_hour=2.0, owned=OWNED, model="llama-3.1-8b"), Requirements(),
                  load_catalog(), date(2026, 12, 1))


def server():  # noqa: ANN201
    return server_month(OWNED, 700, "board power")


def test_a_servers_month_is_its_purchase_hosting_and_energy() -> None:
    s = server()
    assert (round(s.capex_usd, 2), round(s.energy_kwh, 1), round(s.energy_usd, 2)) == (4166.67, 6263.4, 626.34)
    assert round(s.total_usd, 2) == 5793.01
    assert round(usd_per_gpu_hour(OWNED, s), 2) == 0.99


def test_the_residual_value_is_not_spent() -> None:
    s = server_month(OWNED.model_copy(update={"residual_share": 0.25}), 700, "board power")
    assert round(s.capex_usd, 2) == 3125.00  # 150,000 / 48


@pytest.mark.parametrize(("monthly_tokens", "gpus", "usd_per_m_tokens"), [
    (5e9, 2, 1.16),    # 2 replicas (5e9 / 2.628e9 = 1.9): 2 GPUs of one server, $5,793.01 / 5,000 M tokens
    (2e10, 8, 0.29),   # 8 replicas (7.6): the whole server, $5,793.01 / 20,000 M tokens
])
def test_the_same_server_costs_less_per_token_the_busier_it_is(monthly_tokens: float, gpus: int,
                                                              usd_per_m_tokens: float) -> None:
    fleet = owned_fleet(monthly_tokens, R, ISL, OSL, RENTED, OWNED, server())
    assert (fleet.replicas, fleet.gpus_used, fleet.servers) == (gpus, gpus, 1)
    assert round(fleet.monthly_usd, 2) == 5793.01 and fleet.purchase_usd == 200_000
    assert round(fleet.monthly_usd / monthly_tokens * 1e6, 2) == usd_per_m_tokens


def test_a_ninth_gpu_buys_a_second_server() -> None:
    fleet = owned_fleet(8.5 * PER_REPLICA, R, ISL, OSL, RENTED, OWNED, server())
    assert (fleet.gpus_used, fleet.servers, round(fleet.monthly_usd, 2)) == (9, 2, 11586.01)


def test_owning_beats_renting_on_the_step_where_a_servers_gpus_cost_more_rented() -> None:
    """Rented GPUs cost 2 x 730 = $1,460 each a month: 3 cost $4,380 < $5,793.01, 4 cost $5,840 > it. So
    owning wins from the 4th replica on, i.e. just above 3 x 2.628 B = 7.884 B tokens a month."""
    s = server()

    def own(v: float) -> float:
        return owned_fleet(v, R, ISL, OSL, RENTED, OWNED, s).monthly_usd

    def rent(v: float) -> float:
        return fleet_for(v, R, ISL, OSL, RENTED).monthly_usd

    assert first_cheaper(own, rent) == pytest.approx(3 * PER_REPLICA, rel=1e-8)  # to the step, within float noise
    assert own(3 * PER_REPLICA * 0.999) > rent(3 * PER_REPLICA * 0.999)


def test_payback_counts_the_running_costs_not_the_purchase() -> None:
    """At 20 B tokens renting costs 8 x 1,460 = $11,680; owning runs on 1,000 + 626.34 = $1,626.34: it saves
    $10,053.66 a month, so $200,000 pays back in 19.9 months. At 5 B (2 GPUs rented, $2,920): 154.6 months."""
    busy = owned_fleet(2e10, R, ISL, OSL, RENTED, OWNED, server())
    assert round(payback_months(busy, 11_680), 1) == 19.9
    quiet = owned_fleet(5e9, R, ISL, OSL, RENTED, OWNED, server())
    assert round(payback_months(quiet, 2_920), 1) == 154.6
    assert payback_months(quiet, 1_000) is None  # it saves nothing: it never pays back


@pytest.mark.parametrize(("field", "value", "message"), [
    ("amortization_years", 0, "amortization_years"),
    ("server_usd", -5, "server_usd"),
    ("pue", 0.9, "pue"),
])
def test_bad_owned_figures_name_their_field(field: str, value: float, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Owned(**{**OWNED.model_dump(), field: value})


def test_the_draw_measured_at_the_operating_point_powers_the_owned_servers() -> None:
    """550 W per GPU measured: (8 x 550 + 1,000) W x 1.3 x 730 h = 5,124.6 kWh -> $512.46 at $0.10."""
    measured = MeasuredLevel(label="c16", load=16, request_per_s=10.0, output_tokens_per_s=1280.0,
                             input_tokens_per_s=2560.0, slo_attainment=1.0, mean_input_tokens=256,
                             mean_output_tokens=128, num_ok=100, power_w_per_gpu=550.0)
    d = decided_with_owned(measured, 3e9)
    assert d.owned is not None and d.owned.server.power_w_per_gpu == 550.0
    assert d.owned.server.power_source.startswith("measured") and round(d.owned.server.energy_usd, 2) == 512.46


def test_payback_counts_the_residual_value_and_past_the_life_is_no_payback() -> None:
    """With 25 % back at the end, $150,000 is paid back by $10,053.66 a month in 14.9 months. Against a provider
    it saves only $194.67 on ($1,821.01 a month; 200,000 / 194.67 = 1,027.4 months, past the 48-month life)."""
    busy = owned_fleet(2e10, R, ISL, OSL, RENTED, OWNED, server())
    assert round(payback_months(busy, 11_680, residual_share=0.25), 1) == 14.9
    slow = payback_months(busy, 1_821.01)
    assert round(slow, 1) == 1027.4
    said = OwnedComparison(usd_per_gpu_hour=0.99, server=server(), fleet=busy, rent_monthly_usd=11_680,
                           provider_id="x/model", provider_monthly_usd=1_821.01, own_beats_rent_above=None,
                           own_beats_provider_above=None, payback_months_vs_rent=payback_months(busy, 11_680),
                           payback_months_vs_provider=slow, life_months=48)
    assert said.payback_phrase() == ("in 19.9 months against renting and not within its 4-year life against paying "
                                    "per token (1,027.4 months)")
    never = replace(said, payback_months_vs_provider=None)
    assert never.payback_phrase().endswith("never against paying per token (owning saves nothing on it each month)")


def test_a_cost_of_capital_makes_the_purchase_an_annuity_and_maintenance_a_share_of_the_price() -> None:
    """At 8 % a year (i = 0.08 / 12 a month, n = 48): 200,000 x i / (1 - (1 + i)^-48) = $4,882.58 a month, not
    the straight-line $4,166.67; with 25 % back at the end, (200,000 - 50,000 / (1 + i)^48) x the same factor =
    $3,995.27. Maintenance at 5 % a year: 200,000 x 0.05 / 12 = $833.33 a month."""
    financed = OWNED.model_copy(update={"cost_of_capital": 0.08, "maintenance_share_per_year": 0.05})
    s = server_month(financed, 700, "board power")
    assert round(s.capex_usd, 2) == 4882.58 and round(s.maintenance_usd, 2) == 833.33
    assert round(s.total_usd, 2) == round(4882.58446830054 + 1000 + 626.34 + 833.33333, 2)
    resold = server_month(financed.model_copy(update={"residual_share": 0.25}), 700, "board power")
    assert round(resold.capex_usd, 2) == 3995.27


def test_power_is_billed_for_the_hours_operated_and_the_owned_gpu_hour_is_set_beside_the_rented_one() -> None:
    """365 h a month: (8 x 700 + 1,000) W x 1.3 x 365 h = 3,131.7 kWh = $313.17. All month at 730 h the server
    costs $5,793.01, $0.99195 per GPU-hour (5,793.01 / 5,840): 0.496x a $2 rented GPU-hour, and at 2,800 output
    tokens/s 0.99195 / (2,800 x 3,600) x 1e6 = $0.098408 per 1M output tokens."""
    half = server_month(OWNED, 700, "board power", hours_per_month=365)
    assert round(half.energy_kwh, 1) == 3131.7 and round(half.energy_usd, 2) == 313.17
    level = MeasuredLevel(label="c64", load=64, request_per_s=11.2, output_tokens_per_s=2800.0,
                          input_tokens_per_s=11_200.0, slo_attainment=1.0, mean_input_tokens=1000,
                          mean_output_tokens=250, num_ok=100, power_w_per_gpu=700.0)
    d = decided_with_owned(level, 3e10)
    owned = d.owned
    assert owned is not None and round(owned.usd_per_gpu_hour, 5) == 0.99195
    assert round(owned.to_rent_ratio, 3) == 0.496 and round(owned.usd_per_m_output_tokens, 6) == 0.098408
    assert any("per 1M output tokens" in line and "0.496x the rented GPU-hour" in line for line in d.verdict.lines)
