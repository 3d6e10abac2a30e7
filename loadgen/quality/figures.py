"""Graded answers -> accuracy with its 95 % Wilson interval (scipy's), and two options compared on the same
items by the exact McNemar test (a binomial test on the items they disagree on)."""

from __future__ import annotations

from scipy.stats import binomtest

from common.accuracy import Validity
from loadgen.types import Accuracy


def accuracy(num_right: int, num_graded: int) -> Accuracy | None:
    """None when nothing was graded."""
    if num_graded <= 0:
        return None
    low, high = wilson(num_right, num_graded)
    return Accuracy(num_right / num_graded, low, high, num_graded)


def validity(num_valid: int, num_judged: int, faults: dict[str, int] | None = None) -> Validity | None:
    """None when no answer was judged for its shape."""
    if num_judged <= 0:
        return None
    low, high = wilson(num_valid, num_judged)
    return Validity(num_valid / num_judged, low, high, num_judged, dict(faults or {}))


def wilson(successes: int, trials: int) -> tuple[float, float]:
    """The 95 % Wilson score interval of successes / trials."""
    interval = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
    return float(interval.low), float(interval.high)


def mcnemar_p(only_first_right: int, only_second_right: int) -> float:
    """The exact McNemar p-value (two-sided) of two options graded on the same items: of the items only one
    of them got right, how unlikely a split this uneven is if either were as good. 1.0 when they never differ."""
    differ = only_first_right + only_second_right
    if differ == 0:
        return 1.0
    return float(binomtest(only_first_right, differ, 0.5).pvalue)
