"""The whole decision, with the sanity examples worked out independently by hand, to the cent.

Example 1: Llama 3.1 8B on one H100 SXM at $2.99/h, 2,400 output tokens/s at the SLO with 256 input + 128
output tokens per request, 3.0 B tokens/month, peak 2x the average, always on, each replica planned at 80 % of
capacity, one spare, $2,000/month of operations; against Together at $0.18 / $0.18 per 1M tokens.
Example 2: Llama 3.3 70B on 2 x H100 at $2.99/h, 1,500 output tokens/s per replica, 50 B tokens/month,
peak 1.5x, $4,000/month of operations; against Together at $0.88 / $0.88.
The examples' prices are pinned here (EXAMPLES), so their arithmetic stays put when the shipped catalog
is refreshed; the tests of names and defaults use the shipped catalog (CATALOG).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest

from costmodel.decide import decide
from costmodel.inputs import Pricing, Requirements, Traffic
from costmodel.prices import PriceError, load_catalog, parse_price_file
from costmodel.types import EngineLevels, LatencyLimits, MeasuredLevel

CATALOG = load_catalog()
TODAY = date(2026, 12, 1)
EXAMPLE_ROWS = """providers:
  - {id: together/llama-3.1-8b, host: together, model: llama-3.1-8b, usd_per_m_input: 0.18, usd_per_m_output: 0.18,
     source: "https://example.test/together", retrieved: 2026-10-06}
  - {id: together/llama-3.3-70b, host: together, model: llama-3.3-70b, usd_per_m_input: 0.88, usd_per_m_output: 0.88,
     source: "https://example.test/together", retrieved: 2026-10-06}
  - {id: openai/gpt-4o-mini, host: openai, model: gpt-4o-mini, open_weights: false, usd_per_m_input: 0.15,
     usd_per_m_cached_input: 0.075, usd_per_m_output: 0.60, source: "https://example.test/openai",
     retrieved: 2026-10-06}
"""
EXAMPLES = parse_price_file(EXAMPLE_ROWS, "examples.yaml")
H100_AT_2_99 = {"gpu": "h100-sxm", "gpu_usd_per_hour": 2.99}


def one_level(output_tokens_per_s: float, isl: float = 256, osl: float = 128) -> EngineLevels:
    r = output_tokens_per_s / osl
    return EngineLevels("ref", (MeasuredLevel(label="c64", load=64, request_per_s=r,
                                              output_tokens_per_s=output_tokens_per_s, input_tokens_per_s=r * isl,
                                              slo_attainment=1.0, mean_input_tokens=isl, mean_output_tokens=osl,
                                              num_ok=100),))


def example_1(catalog: object = EXAMPLES, **pricing: object) -> object:
    return decide([one_level(2400)], LatencyLimits(), Traffic(monthly_tokens=3e9, peak_to_average=2.0),
                  Pricing(**{**H100_AT_2_99, "ops_usd_per_month": 2000,  # type: ignore[arg-type]
                             "providers": ["together/llama-3.1-8b"], "references": ["openai/gpt-4o-mini"],
                             **pricing}),
                  Requirements(), catalog, TODAY)  # type: ignore[arg-type]


def test_sanity_example_1_small_model_pays_per_token() -> None:
    d = example_1()
    best = d.best
    # R* = 2,400 / 128 = 18.75 req/s; C_req = 2.99 / (3600 * 18.75) = 2.99 / 67,500 = $0.0000442963
    assert best.usd_per_request == pytest.approx(0.0000442963, rel=1e-6)
    level = best.levels[0]
    # per 1M output = 2.99e6 / (3600 * 2,400) = $0.346065 -> $0.35; per 1M total = 2.99e6 / (67,500 * 384) = $0.12
    assert round(level.usd_per_m_output_tokens, 2) == 0.35 and round(level.usd_per_m_total_tokens, 2) == 0.12
    # N = 3e9 / 384 = 7,812,500 requests; peak = 2 * 7,812,500 / 2,628,000 = 5.9456 req/s; u R* = 15 req/s
    # -> 1 serving + 1 spare = 2 GPUs: 2 * 2.99 * 730 + 2,000 = 4,365.40 + 2,000 = $6,365.40
    assert (best.fleet.serving_replicas, best.fleet.gpus) == (1, 2)
    assert round(best.fleet.monthly_usd, 2) == 6365.40
    together = best.provider("together/llama-3.1-8b")
    # a = 384 * 0.18 / 1e6 = $0.00006912; N * a = 7,812,500 * 0.00006912 = $540.00
    assert round(together.monthly_usd, 2) == 540.00
    # rho = 0.0000442963 / 0.00006912 = 0.641 > U_max = 0.8 / 2 = 0.40: no crossover
    assert together.break_even_utilization == pytest.approx(0.640861, rel=1e-5)
    assert together.crossover.monthly_tokens is None
    assert d.verdict.answer == "pay-per-token"
    assert d.verdict.headline.startswith("Pay per token: $540.00/month at together/llama-3.1-8b")
    assert "$6,365.40/month" in d.verdict.headline  # to the cent, as the table says it


def test_sanity_example_1_closed_reference_crosses_over_at_363_billion_tokens() -> None:
    mini = example_1().best.provider("openai/gpt-4o-mini")
    # a = (256 * 0.15 + 128 * 0.60) / 1e6 = (38.40 + 76.80) / 1e6 = $0.0001152; N * a = $900.00; b = $0.30
    assert round(mini.monthly_usd, 2) == 900.00 and round(mini.usd_per_m_tokens, 2) == 0.30
    assert mini.is_secondary and not mini.open_weights
    # rho = 0.0000442963 / 0.0001152 = 0.3845 < 0.40. Vcap(m) = m * 0.8 * 18.75 / 2 * 3600 * 730 * 384
    # = m * 7,568,640,000; V(m) = ((m + 1) * 2.99 * 730 + 2,000) * 1e6 / 0.30 = m * 7,275,666,666.67
    # + 13,942,333,333.33; first m with V(m) <= Vcap(m): m >= 13,942,333,333.33 / 292,973,333.33 = 47.6 -> 48;
    # V(48) = 363,174,333,333.33 tokens (provider $108,952.30 = 49 * 2,182.70 + 2,000)
    assert mini.crossover.serving_replicas == 48
    assert mini.crossover.monthly_tokens == pytest.approx(363_174_333_333.33, abs=0.01)
    assert round(mini.crossover.monthly_tokens * 0.30 / 1e6, 2) == 108952.30


def test_sanity_example_2_large_model_self_hosts() -> None:
    d = decide([one_level(1500)], LatencyLimits(), Traffic(monthly_tokens=50e9, peak_to_average=1.5),
               Pricing(**H100_AT_2_99, gpus_per_replica=2, ops_usd_per_month=4000,  # type: ignore[arg-type]
                       providers=["together/llama-3.3-70b"]), Requirements(), EXAMPLES, TODAY)
    best = d.best
    # R* = 1,500 / 128 = 11.71875; N = 50e9 / 384 = 130,208,333.33; peak = 1.5 * N / 2,628,000 = 74.32 req/s;
    # u R* = 9.375 -> ceil(7.93) = 8 serving + 1 spare = 9 replicas x 2 GPUs = 18 GPUs
    assert (best.fleet.serving_replicas, best.fleet.total_replicas, best.fleet.gpus) == (8, 9, 18)
    # C_self = 9 * 2 * 2.99 * 730 + 4,000 = 39,288.60 + 4,000 = $43,288.60; C_api = 50e9 * 0.88 / 1e6 = $44,000.00
    assert round(best.fleet.monthly_usd, 2) == 43288.60
    together = best.provider("together/llama-3.3-70b")
    assert round(together.monthly_usd, 2) == 44000.00
    # Vcap(m) = m * 6,307,200,000; V(m) = m * 4,960,681,818.18 + 9,506,136,363.64 -> m = 8,
    # V(8) = 49,191,590,909.09 tokens/month (both sides $43,288.60 there)
    assert together.crossover.monthly_tokens == pytest.approx(49_191_590_909.09, abs=0.01)
    assert d.verdict.answer == "self-host"
    assert d.verdict.headline.startswith("Self-host: $43,288.60/month against $44,000.00/month")
    assert "$711.40/month less" in d.verdict.headline
    flips = [row.name for row in d.sensitivity.rows if d.sensitivity.flips(row)]
    assert "Throughput at the SLO" in flips and "GPU price" in flips  # a close call, and the report says so


def test_a_requirement_decides_and_the_cost_section_still_sizes_it() -> None:
    d = decide([one_level(2400)], LatencyLimits(), Traffic(monthly_tokens=3e9),
               Pricing(gpu="h100-sxm", model="llama-3.1-8b"),
               Requirements(data_must_stay_on_premises=True, reason="patient records"), CATALOG, TODAY)
    assert d.verdict.answer == "self-host-required"
    assert "data must stay on our own infrastructure (patient records)" in d.verdict.headline
    assert d.best.fleet is not None and d.verdict.self_host_usd_per_month == d.best.fleet.monthly_usd


def test_without_traffic_the_answer_is_the_crossover_volume() -> None:
    pricing = Pricing(**H100_AT_2_99, providers=["openai/gpt-4o-mini"])  # type: ignore[arg-type]
    d = decide([one_level(2400)], LatencyLimits(), None, pricing, Requirements(), EXAMPLES, TODAY)
    assert d.best.fleet is None and d.verdict.answer == "depends-on-volume"
    assert "above" in d.verdict.headline and any("No traffic volume given" in line for line in d.verdict.lines)
    assert any("peak-to-average 2 (assumed" in text for text in d.pricing.assumed)
    no_cross = decide([one_level(2400)], LatencyLimits(), None, Pricing(**H100_AT_2_99, model="llama-3.1-8b"),  # type: ignore[arg-type]
                      Requirements(), EXAMPLES, TODAY)
    assert no_cross.verdict.answer == "pay-per-token" and "at any volume" in no_cross.verdict.headline


def test_no_level_meeting_the_slo_leaves_the_decision_open_and_says_why() -> None:
    slow = EngineLevels("ref", (MeasuredLevel(label="c8", load=8, request_per_s=5.0, output_tokens_per_s=640,
                                              input_tokens_per_s=1280, slo_attainment=0.5, ttft_p95_ms=4000,
                                              num_ok=10, mean_input_tokens=256, mean_output_tokens=128),))
    d = decide([slow], LatencyLimits(ttft_ms=2000), Traffic(monthly_tokens=3e9),
               Pricing(gpu="h100-sxm", model="llama-3.1-8b"), Requirements(), CATALOG, TODAY)
    assert d.best is None and d.verdict.answer == "undecided"
    assert any("c8: SLO attainment 50.0% < 95%, p95 TTFT 4,000 ms > 2,000 ms" in line for line in d.verdict.lines)
    assert d.results[0].levels[0].usd_per_request is not None  # the per-level costs are still there


def test_the_cheaper_engine_is_the_one_the_verdict_uses() -> None:
    slow, fast = one_level(1200), one_level(2400)
    d = decide([EngineLevels("slow", slow.levels), EngineLevels("fast", fast.levels)], LatencyLimits(),
               Traffic(monthly_tokens=30e9), Pricing(gpu="h100-sxm", model="llama-3.1-8b"), Requirements(),
               CATALOG, TODAY)
    assert d.best.engine == "fast"


def test_compared_to_the_cheapest_host_of_the_same_open_model() -> None:
    d = decide([one_level(2400)], LatencyLimits(), Traffic(monthly_tokens=3e9),
               Pricing(**H100_AT_2_99, model="llama-3.1-8b"), Requirements(), CATALOG, TODAY)  # type: ignore[arg-type]
    # the shipped 8B hosts: deepinfra 0.02 / 0.04 is the cheapest ((256 * 0.02 + 128 * 0.04) / 1e6 per request)
    assert d.compared_to.id == "deepinfra/llama-3.1-8b"
    cheapest = min((p for p in d.best.providers if not p.is_secondary), key=lambda p: p.usd_per_request)
    assert d.compared_to.id == cheapest.id and d.compared_to.open_weights


def test_unknown_names_and_a_missing_gpu_price_are_errors_that_say_what_to_give() -> None:
    with pytest.raises(PriceError, match="no GPU price: give --gpu NAME"):
        decide([one_level(2400)], LatencyLimits(), None, Pricing(model="llama-3.1-8b"), Requirements(), CATALOG, TODAY)
    with pytest.raises(PriceError, match="unknown GPU 'b9000'"):
        decide([one_level(2400)], LatencyLimits(), None, Pricing(gpu="b9000"), Requirements(), CATALOG, TODAY)
    with pytest.raises(PriceError, match="unknown provider 'acme/llama'"):
        decide([one_level(2400)], LatencyLimits(), None, Pricing(gpu="h100-sxm", providers=["acme/llama"]),
               Requirements(), CATALOG, TODAY)


def test_your_own_gpu_price_wins_and_zero_is_allowed() -> None:
    d = example_1(gpu="my-rack", gpu_usd_per_hour=0.0, ops_usd_per_month=0.0)
    assert d.best.fleet.monthly_usd == 0.0 and d.verdict.answer == "self-host"
    assert d.compared_to.crossover.monthly_tokens == 0.0
    assert "my-rack at your price" in d.pricing.gpu_label


@pytest.mark.parametrize("row", ["together/h100-sxm/reserved", "my-rack"])
def test_reserved_gpus_bill_every_hour(row: str) -> None:
    """A 91-180 days' reservation from the catalog, or 3 years' at your own price: 730 billed hours, no
    autoscaling."""
    pricing = {"gpu": row, "gpu_usd_per_hour": None} if "/" in row else \
        {"gpu": row, "gpu_usd_per_hour": 2.0, "gpu_pricing": "reserved-3y"}
    d = example_1(CATALOG, **pricing, references=[])
    assert d.pricing.assumptions.billed_hours_per_month == 730 and not d.pricing.assumptions.autoscale


def test_serverless_gpus_bill_the_hours_of_operation_and_warn_of_cold_starts() -> None:
    d = decide([one_level(2400)], LatencyLimits(), Traffic(monthly_tokens=3e9, hours_per_month=260),
               Pricing(gpu="h100-sxm", gpu_pricing="serverless", model="llama-3.1-8b"), Requirements(), CATALOG,
               TODAY)
    assert d.pricing.gpu.id == "modal/h100-sxm/serverless"  # the only dated serverless H100 row
    assert d.pricing.assumptions.billed_hours_per_month == 260 and d.pricing.assumptions.autoscale
    assert any("cold start (a time this price row does not give)" in w for w in d.warnings)


def test_stale_and_undated_prices_are_named() -> None:
    d = example_1(CATALOG, gpu="runpod/h100-sxm/serverless", gpu_usd_per_hour=None, providers=["cerebras/llama-3.1-8b"],
                  references=[])
    # on 2026-12-01, cerebras (2025-11-07) is 389 days old; the RunPod serverless row has no date at all
    assert [(s.id, s.age_days) for s in d.stale_prices] == [("cerebras/llama-3.1-8b", 389)]
    assert "undated price(s), their source gives no date: runpod/h100-sxm/serverless" in d.warnings


def test_a_measured_level_labelled_given_is_still_a_measured_one() -> None:
    """Only a throughput typed in (kind `given`) skips the "measure more load" warning and reads "as given"."""
    measured = EngineLevels("ref", (MeasuredLevel(label="given", load=8, request_per_s=10.0, output_tokens_per_s=1280,
                                                  input_tokens_per_s=2560, mean_input_tokens=256,
                                                  mean_output_tokens=128, num_ok=100),))
    d = decide([measured], LatencyLimits(), Traffic(monthly_tokens=3e9), Pricing(gpu="h100-sxm", model="llama-3.1-8b"),
               Requirements(), CATALOG, TODAY)
    assert any("the SLO held at the highest measured level (given)" in w for w in d.results[0].warnings)
    assert "as given" not in d.verdict.lines[0] and "meets the SLO" in d.verdict.lines[0]
    typed = replace(measured.levels[0], kind="given")
    d = decide([EngineLevels("ref", (typed,))], LatencyLimits(), Traffic(monthly_tokens=3e9),
               Pricing(gpu="h100-sxm", model="llama-3.1-8b"), Requirements(), CATALOG, TODAY)
    assert not any("highest measured level" in w for w in d.results[0].warnings)
    assert "as given" in d.verdict.lines[0]


def test_a_level_of_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind must be one of concurrency, rate, trace, given"):
        MeasuredLevel(label="c1", load=1, request_per_s=1.0, output_tokens_per_s=1.0, input_tokens_per_s=1.0,
                      kind="closed-loop")  # type: ignore[arg-type]
