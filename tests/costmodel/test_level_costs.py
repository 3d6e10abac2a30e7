"""Per-level costs and provider prices, against figures worked out by hand (COSTMODEL.md, "Per level").

The fixture: one GPU at $3.60/h (P = 1 * 3.60), a level doing R = 1 request/s of 400 input + 100 output
tokens (X_out = 100 tokens/s, X_in = 400 tokens/s), 80 % of requests meeting the SLO.
"""

from __future__ import annotations

import pytest

from costmodel.model import (
    blended_usd_per_m_tokens,
    break_even_utilization,
    cost_per,
    level_cost,
    provider_usd_per_request,
    request_price,
)
from costmodel.prices import ProviderPrice
from costmodel.types import LatencyLimits, MeasuredLevel

P = 3.60
LEVEL = MeasuredLevel(label="c4", load=4, request_per_s=1.0, output_tokens_per_s=100.0, input_tokens_per_s=400.0,
                      slo_attainment=0.8, mean_input_tokens=400, mean_output_tokens=100, num_ok=50)


def test_cost_per_request_and_per_million_tokens_by_hand() -> None:
    cost = level_cost(LEVEL, P, LatencyLimits(), attainment_target=0.5)
    # C_req = P / (3600 * R) = 3.60 / 3600 = $0.001
    assert cost.usd_per_request == pytest.approx(0.001)
    # per 1M output = P * 1e6 / (3600 * X_out) = 3.6e6 / 360,000 = $10.00
    assert round(cost.usd_per_m_output_tokens, 2) == 10.00
    # per 1M total = 3.6e6 / (3600 * (400 + 100)) = 3.6e6 / 1,800,000 = $2.00
    assert round(cost.usd_per_m_total_tokens, 2) == 2.00
    # goodput variant: R and X times A = 0.8 -> 3.60 / 2880 = $0.00125; 3.6e6 / (3600 * 80) = $12.50
    assert cost.goodput_usd_per_request == pytest.approx(0.00125)
    assert round(cost.goodput_usd_per_m_output_tokens, 2) == 12.50
    assert cost.meets_slo


def test_a_level_with_zero_goodput_has_no_finite_cost_and_never_qualifies() -> None:
    dead = MeasuredLevel(label="c64", load=64, request_per_s=0.0, output_tokens_per_s=0.0, input_tokens_per_s=0.0,
                         slo_attainment=0.0, num_ok=0)
    cost = level_cost(dead, P, LatencyLimits(), 0.95)
    assert cost.usd_per_request is None and cost.usd_per_m_output_tokens is None
    assert cost.usd_per_m_total_tokens is None and cost.goodput_usd_per_request is None
    assert "no request completed" in cost.slo_problems
    # Requests complete but none meets the SLO: the plain cost is finite, the goodput cost is not.
    slow = MeasuredLevel(label="c32", load=32, request_per_s=2.0, output_tokens_per_s=200.0,
                         input_tokens_per_s=800.0, slo_attainment=0.0, num_ok=40)
    slow_cost = level_cost(slow, P, LatencyLimits(), 0.95)
    assert slow_cost.usd_per_request == pytest.approx(0.0005) and slow_cost.goodput_usd_per_request is None


def test_a_gpu_price_of_zero_costs_zero_per_request() -> None:
    cost = level_cost(LEVEL, 0.0, LatencyLimits(), 0.5)
    assert cost.usd_per_request == 0.0 and cost.usd_per_m_output_tokens == 0.0
    assert cost_per(0.0, 0.0) is None  # nothing produced is still unbounded, not free


def test_provider_price_per_request_with_cache_hits_and_batch_discount_by_hand() -> None:
    # a = (ISL * ((1-h) p_in + h p_cached) + OSL * p_out) * (1 - beta) / 1e6
    #   = (400 * (0.75 * 0.50 + 0.25 * 0.10) + 100 * 1.50) * 0.5 / 1e6
    #   = (400 * 0.40 + 150) * 0.5 / 1e6 = 310 * 0.5 / 1e6 = $0.000155
    a = provider_usd_per_request(0.50, 0.10, 1.50, isl=400, osl=100, cache_hit_rate=0.25, batch_discount=0.5)
    assert a == pytest.approx(0.000155)
    # b = a * 1e6 / (ISL + OSL) = 155 / 500 = $0.31 per 1M tokens
    assert round(blended_usd_per_m_tokens(a, 400, 100), 2) == 0.31
    # no cache, no batch: (400 * 0.50 + 100 * 1.50) / 1e6 = $0.00035, b = 350 / 500 = $0.70
    plain = provider_usd_per_request(0.50, 0.10, 1.50, 400, 100)
    assert plain == pytest.approx(0.00035) and round(blended_usd_per_m_tokens(plain, 400, 100), 2) == 0.70


def test_batch_discount_applies_only_to_traffic_that_uses_the_batch_api() -> None:
    row = ProviderPrice(id="x/m", host="x", model="m", usd_per_m_input=0.5, usd_per_m_output=1.5,
                        batch_discount=0.5, source="https://x.example", retrieved="2025-01-01")
    assert request_price(row, 400, 100) == pytest.approx(0.00035)
    assert request_price(row, 400, 100, uses_batch_api=True) == pytest.approx(0.000175)
    # no cached price listed: a cache hit costs the input price
    assert request_price(row, 400, 100, cache_hit_rate=1.0) == pytest.approx(0.00035)


def test_break_even_utilization_is_self_cost_over_provider_cost() -> None:
    # rho = C_req / a = 0.001 / 0.00035 = 2.857...: above 1, self-hosting never wins
    assert break_even_utilization(0.001, 0.00035) == pytest.approx(2.857142857)
    assert break_even_utilization(0.0001, 0.0004) == pytest.approx(0.25)
    assert break_even_utilization(None, 0.0004) is None
    assert break_even_utilization(0.001, 0.0) is None  # a free provider: no utilization breaks even
