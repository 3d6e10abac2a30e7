"""A level's bill from the server's usage, worked by hand to the cent."""

from __future__ import annotations

from datetime import date

import pytest

from costmodel.bill import level_bill
from costmodel.prices import ProviderPrice
from costmodel.types import TokenUsage

PRICE = ProviderPrice(id="host/model-x", host="host", model="model-x", usd_per_m_input=0.25,
                      usd_per_m_cached_input=0.025, usd_per_m_output=2.00, batch_discount=0.5,
                      source="https://example.com/pricing", retrieved=date(2026, 10, 6))


def usage(**changes: object) -> TokenUsage:
    base = {"num_requests": 1000, "num_with_usage": 1000, "prompt_tokens": 2_000_000,
            "cached_prompt_tokens": 800_000, "completion_tokens": 500_000, "asked_output_tokens": 500_000,
            "counted_output_tokens": 500_000, "reasoning_tokens": 200_000}
    return TokenUsage(**{**base, **changes})  # type: ignore[arg-type]


def test_the_bill_prices_uncached_cached_and_completion_tokens_apart() -> None:
    """1.2M uncached x $0.25 = $0.30; 0.8M cached x $0.025 = $0.02; 0.5M completion x $2 = $1.00."""
    bill = level_bill("c8", usage(), PRICE, assumed_cache_hit_rate=0.4)
    assert (round(bill.input_usd, 2), round(bill.cached_input_usd, 2), round(bill.output_usd, 2)) == (0.30, 0.02, 1.00)
    assert round(bill.billed_usd, 2) == 1.32
    # expected: 2M prompt x (0.6 x 0.25 + 0.4 x 0.025) = $0.32, plus 0.5M asked x $2 = $1.00
    assert round(bill.expected_usd, 2) == 1.32
    assert bill.mismatches == ()


def test_the_batch_discount_halves_both() -> None:
    bill = level_bill("c8", usage(), PRICE, assumed_cache_hit_rate=0.4, uses_batch_api=True)
    assert round(bill.billed_usd, 2) == 0.66 and round(bill.expected_usd, 2) == 0.66


def test_tokens_billed_but_never_streamed_are_flagged() -> None:
    """Hidden reasoning: the server bills 700k completion tokens, 500k arrived."""
    bill = level_bill("c8", usage(completion_tokens=700_000), PRICE, assumed_cache_hit_rate=0.4)
    assert round(bill.billed_usd, 2) == 1.72
    assert any("700,000 completion tokens billed, 500,000 arrived" in m for m in bill.mismatches)


def test_short_answers_missing_usage_and_another_cache_rate_are_flagged() -> None:
    bill = level_bill("c8", usage(counted_output_tokens=450_000, completion_tokens=450_000, num_with_usage=990),
                      PRICE, assumed_cache_hit_rate=0.0)
    text = " | ".join(bill.mismatches)
    assert "450,000 output tokens arrived of 500,000 asked" in text
    assert "10 of 1000 answers carried no usage" in text
    assert "40% of prompt tokens were billed as cached, not the 0%" in text


def test_no_cached_price_bills_cached_tokens_at_the_input_price() -> None:
    plain = PRICE.model_copy(update={"usd_per_m_cached_input": None})
    bill = level_bill("c8", usage(), plain)
    assert bill.cached_input_usd == pytest.approx(0.8 * 0.25)
