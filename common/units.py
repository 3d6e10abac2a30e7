"""How money, volumes and shares read in verdicts and reports: one place, so every output agrees."""

from __future__ import annotations

import math


def usd(value: float | None, cents: bool | None = None) -> str:
    """$12,345 at or above $1,000 (always cents with cents=True), $12.34 from $1, and three significant digits
    below $1, at least to the cent ($0.024, $0.158, $0.50, $0.0000443), a leading minus for negative amounts."""
    if value is None:
        return "-"
    amount = abs(value)
    if 0 < amount < 1:
        text = f"{amount:.{2 - math.floor(math.log10(amount))}f}"
        whole, fraction = text.split(".")
        text = f"${whole}.{fraction.rstrip('0').ljust(2, '0')}"
    elif cents or (cents is None and amount < 1000):
        text = f"${amount:,.2f}"
    else:
        text = f"${amount:,.0f}"
    return f"-{text}" if value < 0 else text


def usd_rate(value: float | None) -> str:
    """A price per unit (a GPU-hour) as it is quoted: to the cent, and the cents' fraction kept when it has one
    ($2.99, $1.1375, $0.5625), never rounded away."""
    if value is None:
        return "-"
    text = f"{abs(value):,.4f}".rstrip("0")
    whole, fraction = text.split(".")
    return f"{'-' if value < 0 else ''}${whole}.{fraction.ljust(2, '0')}"


def tokens(value: float | None) -> str:
    """3.0e9 -> '3.0 B', 450e6 -> '450 M', 1200 -> '1,200'."""
    if value is None:
        return "-"
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            number = value / scale
            return f"{number:,.1f} {suffix}" if number < 100 else f"{number:,.0f} {suffix}"
    return f"{value:,.0f}"


def share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"
