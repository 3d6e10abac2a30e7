"""Money reads the same everywhere: small amounts keep their significant digits, large ones stay whole."""

from __future__ import annotations

import pytest

from common.units import usd


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.024, "$0.024"),  # a price per 1M tokens: not $0.02
        (0.0267, "$0.0267"),
        (0.158, "$0.158"),
        (0.18, "$0.18"),  # trailing zeros stop at the cent
        (0.5, "$0.50"),
        (0.0000442963, "$0.0000443"),
        (0.00999, "$0.00999"),
        (0.9996, "$1.00"),
        (1.006, "$1.01"),
        (12.345, "$12.35"),
        (999.99, "$999.99"),
        (6365.4, "$6,365"),
        (-0.024, "-$0.024"),
        (0.0, "$0.00"),
        (None, "-"),
    ],
)
def test_usd_keeps_three_significant_digits_below_a_dollar(value: float | None, text: str) -> None:
    assert usd(value) == text


def test_cents_on_large_amounts_and_digits_on_small_ones() -> None:
    assert usd(6365.4, cents=True) == "$6,365.40" and usd(0.024, cents=True) == "$0.024"
    assert usd(540.0, cents=False) == "$540"
