"""Graded answers as every part states them: the share right, its 95 % Wilson interval, and how many were graded
(loadgen grades and computes it; costmodel lets it limit the verdict; reports show it)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Accuracy:
    accuracy: float
    low: float
    high: float
    n: int

    def describe(self) -> str:
        """`62% (95 % interval 56-68%, 300 graded)`."""
        return f"{self.accuracy:.0%} (95 % interval {self.low * 100:.0f}-{self.high:.0%}, {self.n} graded)"


@dataclass(frozen=True)
class Validity:
    """Shaped answers judged (JSON, a schema, tool calls: loadgen.structured): the share valid, its 95 % Wilson
    interval, how many were judged, and the invalid ones by fault (not_json, schema, cut, ...)."""

    valid: float
    low: float
    high: float
    n: int
    faults: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        """`97% valid (95 % interval 93-99%, 300 judged)`."""
        return f"{self.valid:.0%} valid (95 % interval {self.low * 100:.0f}-{self.high:.0%}, {self.n} judged)"

    def faults_text(self) -> str:
        """`schema 4, cut 1`: the invalid answers by fault, most first."""
        return ", ".join(f"{fault} {count}" for fault, count in sorted(self.faults.items(), key=lambda kv: -kv[1]))
