"""Graded answers as every part states them: the share right, its 95 % Wilson interval, and how many were graded
(loadgen grades and computes it; costmodel lets it limit the verdict; reports show it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Accuracy:
    accuracy: float
    low: float
    high: float
    n: int

    def describe(self) -> str:
        """`62% (95 % interval 56-68%, 300 graded)`."""
        return f"{self.accuracy:.0%} (95 % interval {self.low * 100:.0f}-{self.high:.0%}, {self.n} graded)"
