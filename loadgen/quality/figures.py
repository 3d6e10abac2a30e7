"""Graded answers -> accuracy with its 95 % Wilson interval (scipy's), and two options compared on the same
items by the exact McNemar test (a binomial test on the items they disagree on)."""

from __future__ import annotations

from scipy.stats import binomtest

from loadgen.types import Accuracy


def accuracy(num_right: int, num_graded: int) -> Accuracy | None:
    """None when nothing was graded."""
    if num_graded <= 0:
        return None
    interval = binomtest(num_right, num_graded).proportion_ci(confidence_level=0.95, method="wilson")
    return Accuracy(num_right / num_graded, float(interval.low), float(interval.high), num_graded)


def mcnemar_p(only_first_right: int, only_second_right: int) -> float:
    """The exact McNemar p-value (two-sided) of two options graded on the same items: of the items only one
    of them got right, how unlikely a split this uneven is if either were as good. 1.0 when they never differ."""
    differ = only_first_right + only_second_right
    if differ == 0:
        return 1.0
    return float(binomtest(only_first_right, differ, 0.5).pvalue)
