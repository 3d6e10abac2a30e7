"""N LoRA fine-tunes priced three ways (costmodel/finetunes.py), worked out by hand.

One replica of 1 GPU at $2.00/h carries 1 request a second (500 input + 500 output tokens); the base model's
host charges $0.50 / $1.50 per 1M tokens, so a request costs it $0.001. 8 fine-tunes share 1e9 tokens a month:
one million requests, 0.3805 a second over 730 h, one replica at peak 1x planned at 100% of its capacity:
$1,460 a month.
"""

from __future__ import annotations

from datetime import date

import pytest

from costmodel.decide import decide_given
from costmodel.finetunes import decide_finetunes
from costmodel.inputs import Pricing, Requirements, Traffic
from costmodel.prices import parse_price_file

ROWS = parse_price_file("""providers:
  - {id: host/base, host: host, model: base, usd_per_m_input: 0.50, usd_per_m_output: 1.50,
     source: "https://example.test/host", retrieved: 2026-10-06}
  - {id: other/base, host: other, model: base, usd_per_m_input: 0.25, usd_per_m_output: 0.75,
     source: "https://example.test/other", retrieved: 2026-10-06}
finetunes:
  - {id: host/serverless-lora, host: host, kind: serverless-lora, base_price_markup: 1.5, usd_per_adapter_month: 2.0,
     source: "https://example.test/host-lora", retrieved: 2026-10-06}
  - {id: nobody/serverless-lora, host: nobody, kind: serverless-lora, base_price_markup: 1.0,
     source: "https://example.test/nobody", retrieved: 2024-01-01}
  - {id: host/gpu/dedicated, host: host, kind: dedicated, usd_per_gpu_hour: 4.0, gpu: h100-sxm,
     source: "https://example.test/host-dedicated", retrieved: 2026-10-06}
""", "rows.yaml")
PRICING = Pricing(gpu="h100-sxm", gpu_usd_per_hour=2.0, providers=["host/base"], spare_replicas=0, headroom=1.0)
TODAY = date(2026, 12, 1)


def decision(monthly_tokens: float | None = 1e9):  # noqa: ANN201
    traffic = Traffic(monthly_tokens=monthly_tokens, peak_to_average=1.0) if monthly_tokens else None
    return decide_given(500.0, 500, 500, traffic, PRICING, Requirements(), ROWS, TODAY)


def test_the_three_ways_are_priced_as_worked_out() -> None:
    said = decide_finetunes(decision(), 8, ROWS.finetunes)
    assert said is not None
    options = {o.label: o for o in said.options}
    assert options["self-hosted, 8 adapters on one fleet"].monthly_usd == pytest.approx(2.0 * 730)
    # the host's own base bill (1M requests x $0.001) x 1.5, and $2 for each of 8 adapters
    assert options["host serverless LoRA (1.5x the base price + $2.00/adapter-month)"].monthly_usd == \
        pytest.approx(1_000_000 * 0.001 * 1.5 + 8 * 2.0)
    nobody = options["nobody serverless LoRA (the base price)"]  # no base row of its own: the compared host's
    assert nobody.monthly_usd == pytest.approx(1000.0) and "(no nobody row for base)" in nobody.detail
    assert nobody.is_stale  # dated 2024-01-01: over a year before the decision
    # each of 8 dedicated fleets carries 1/8 of the traffic and still runs one replica all month
    dedicated = [o for o in said.options if o.kind == "dedicated"]
    assert [o.monthly_usd for o in dedicated] == [pytest.approx(8 * 2.0 * 730), pytest.approx(8 * 4.0 * 730)]
    assert said.cheapest is not None and said.cheapest.label.startswith("nobody")


def test_the_crossovers_in_tokens_and_in_adapters() -> None:
    said = decide_finetunes(decision(), 8, ROWS.finetunes)
    assert said is not None
    # against the cheapest serverless price ($0.001 a request): a replica's request costs $2 / 3600 = $0.000556,
    # 0.56 of it, so self-hosting wins once a replica is kept busy enough; the decision's crossover arithmetic
    assert said.crossover_tokens is not None and said.crossover_tokens > 1e9
    # one replica ($1,460) carries all 8; two dedicated deployments already cost $2,920
    assert said.crossover_adapters == 2
    assert any("From 2 fine-tunes on" in line for line in said.lines)
    assert any("nobody/serverless-lora is dated 2024-01-01" in line for line in said.lines)


def test_without_traffic_the_options_are_named_but_not_summed() -> None:
    said = decide_finetunes(decision(None), 4, ROWS.finetunes)
    assert said is not None
    assert all(o.monthly_usd is None for o in said.options) and said.crossover_adapters is None
    assert "No monthly traffic given" in said.lines[0]


def test_a_catalog_row_missing_its_price_is_refused() -> None:
    from costmodel.prices import PriceError

    with pytest.raises(PriceError, match="kind serverless-lora needs base_price_markup"):
        parse_price_file("""finetunes:
  - {id: x/lora, host: x, kind: serverless-lora, source: "https://example.test", retrieved: 2026-10-06}
""", "bad.yaml")
    with pytest.raises(PriceError, match="kind dedicated needs usd_per_gpu_hour and gpu"):
        parse_price_file("""finetunes:
  - {id: x/dedicated, host: x, kind: dedicated, usd_per_gpu_hour: 3.0, source: "https://example.test", retrieved: null}
""", "bad.yaml")
