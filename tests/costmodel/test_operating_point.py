"""The operating point c*: the highest load that meets the SLO, interpolated, never extrapolated."""

from __future__ import annotations

import pytest

from costmodel.model import operating_point
from costmodel.types import LatencyLimits, MeasuredLevel

SLO_1S = LatencyLimits(ttft_ms=1000, tpot_ms=100)


def level(label: str, load: float, r: float, attainment: float, ttft: float | None, tpot: float | None,
          num_ok: int = 100, is_valid: bool = True) -> MeasuredLevel:
    return MeasuredLevel(label, load, r, r * 100, r * 400, attainment, ttft, tpot, None, 400, 100, num_ok, is_valid)


C1 = level("c1", 1, 1.0, 1.0, 200, 20)
C4 = level("c4", 4, 3.6, 1.0, 600, 40)
C8 = level("c8", 8, 6.0, 0.9, 1800, 60)


def test_interpolates_to_the_first_criterion_that_reaches_its_limit() -> None:
    point = operating_point([C8, C1, C4], SLO_1S, 0.95)  # order of the input does not matter
    assert point is not None
    # c4 passes, c8 fails on attainment (0.9 < 0.95) and p95 TTFT (1800 > 1000 ms).
    # attainment reaches 0.95 at f = (0.95 - 1.0) / (0.9 - 1.0) = 0.5 of the way;
    # TTFT reaches 1000 ms at f = (1000 - 600) / (1800 - 600) = 1/3: TTFT binds first.
    # c* = 4 + 4/3 = 5.333; R* = 3.6 + (6.0 - 3.6) / 3 = 4.4 req/s; X* = 360 + 240 / 3 = 440 tokens/s
    assert point.load == pytest.approx(16 / 3)
    assert point.request_per_s == pytest.approx(4.4)
    assert point.output_tokens_per_s == pytest.approx(440)
    assert (point.below, point.above, point.is_interpolated) == ("c4", "c8", True)
    assert point.limited_by == "p95 TTFT 1,000 ms"


def test_never_extrapolates_beyond_the_highest_measured_level() -> None:
    point = operating_point([C1, C4], SLO_1S, 0.95)
    assert point is not None
    assert (point.load, point.request_per_s, point.below, point.above) == (4, 3.6, "c4", None)
    assert "highest measured level" in point.limited_by


def test_a_single_level_that_meets_the_slo_is_the_operating_point() -> None:
    point = operating_point([C1], SLO_1S, 0.95)
    assert point is not None and point.request_per_s == 1.0 and not point.is_interpolated


def test_no_level_meeting_the_slo_gives_no_operating_point() -> None:
    assert operating_point([C8], SLO_1S, 0.95) is None
    assert operating_point([], SLO_1S, 0.95) is None


def test_attainment_target_099_is_stricter_than_095() -> None:
    almost = level("c4", 4, 3.6, 0.97, 600, 40)
    assert operating_point([C1, almost], SLO_1S, 0.95).below == "c4"  # type: ignore[union-attr]
    assert operating_point([C1, almost], SLO_1S, 0.99).below == "c1"  # type: ignore[union-attr]


def test_a_collapsed_level_above_does_not_drag_the_point_below_the_passing_level() -> None:
    # c16 completed nothing: interpolating toward R = 0 would give less than c4 itself, so c* stays at c4.
    dead = level("c16", 16, 0.0, 0.0, None, None, num_ok=0)
    point = operating_point([C1, C4, dead], SLO_1S, 0.95)
    assert point is not None and point.request_per_s == 3.6 and point.below == "c4" and point.above == "c16"
    assert not point.is_interpolated


def test_an_invalid_level_is_never_the_operating_point_nor_interpolated_toward() -> None:
    bad = level("c8", 8, 6.0, 1.0, 700, 50, is_valid=False)
    point = operating_point([C1, C4, bad], SLO_1S, 0.95)
    assert point is not None and point.below == "c4" and point.above is None and "invalid" in point.limited_by


def test_the_highest_passing_level_wins_even_above_a_failing_one() -> None:
    noisy = level("c2", 2, 1.9, 0.9, 300, 30)  # fails attainment, but c4 above it passes
    point = operating_point([C1, noisy, C4], SLO_1S, 0.95)
    assert point is not None and point.below == "c4"
