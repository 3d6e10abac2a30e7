"""The operating point c*: the highest *measured* load that meets the SLO, never interpolated toward a
failing level (latency rises faster than linearly there) and never extrapolated."""

from __future__ import annotations

from dataclasses import replace

from costmodel.model import operating_point
from costmodel.types import LatencyLimits, MeasuredLevel

SLO_1S = LatencyLimits(ttft_ms=1000, tpot_ms=100)


def level(label: str, load: float, r: float, attainment: float, ttft: float | None, tpot: float | None,
          num_ok: int = 100, is_valid: bool = True) -> MeasuredLevel:
    return MeasuredLevel(label=label, load=load, request_per_s=r, output_tokens_per_s=r * 100,
                         input_tokens_per_s=r * 400, slo_attainment=attainment, ttft_p95_ms=ttft, tpot_p95_ms=tpot,
                         e2e_p95_ms=None, mean_input_tokens=400, mean_output_tokens=100, num_ok=num_ok,
                         is_valid=is_valid)


C1 = level("c1", 1, 1.0, 1.0, 200, 20)
C4 = level("c4", 4, 3.6, 1.0, 600, 40)
C8 = level("c8", 8, 6.0, 0.9, 1800, 60)


def test_the_highest_passing_level_is_the_point_and_the_next_one_says_why_not_higher() -> None:
    point = operating_point([C8, C1, C4], SLO_1S, 0.95)  # order of the input does not matter
    assert point is not None
    assert (point.load, point.request_per_s, point.output_tokens_per_s) == (4, 3.6, 360)
    assert (point.level, point.next_failing) == ("c4", "c8")
    assert point.limited_by == "c8 above it: SLO attainment 90.0% < 95%; p95 TTFT 1,800 ms > 1,000 ms"


def test_never_extrapolates_beyond_the_highest_measured_level() -> None:
    point = operating_point([C1, C4], SLO_1S, 0.95)
    assert point is not None
    assert (point.load, point.request_per_s, point.level, point.next_failing) == (4, 3.6, "c4", None)
    assert "highest measured level" in point.limited_by


def test_a_single_level_that_meets_the_slo_is_the_operating_point() -> None:
    point = operating_point([C1], SLO_1S, 0.95)
    assert point is not None and point.request_per_s == 1.0 and point.request_per_s_range is None


def test_no_level_meeting_the_slo_gives_no_operating_point() -> None:
    assert operating_point([C8], SLO_1S, 0.95) is None
    assert operating_point([], SLO_1S, 0.95) is None


def test_attainment_target_099_is_stricter_than_095() -> None:
    almost = level("c4", 4, 3.6, 0.97, 600, 40)
    assert operating_point([C1, almost], SLO_1S, 0.95).level == "c4"  # type: ignore[union-attr]
    assert operating_point([C1, almost], SLO_1S, 0.99).level == "c1"  # type: ignore[union-attr]


def test_a_collapsed_level_above_leaves_the_point_at_the_passing_level() -> None:
    dead = level("c16", 16, 0.0, 0.0, None, None, num_ok=0)
    point = operating_point([C1, C4, dead], SLO_1S, 0.95)
    assert point is not None and point.request_per_s == 3.6 and point.level == "c4" and point.next_failing == "c16"
    assert "no request completed" in point.limited_by


def test_an_invalid_level_is_never_the_operating_point() -> None:
    bad = level("c8", 8, 6.0, 1.0, 700, 50, is_valid=False)
    point = operating_point([C1, C4, bad], SLO_1S, 0.95)
    assert point is not None and point.level == "c4" and point.next_failing == "c8" and "invalid" in point.limited_by


def test_a_failing_level_bounds_the_point_even_when_one_above_it_passes() -> None:
    noisy = level("c2", 2, 1.9, 0.9, 300, 30)  # fails attainment, but c4 above it passes
    point = operating_point([C1, noisy, C4], SLO_1S, 0.95)
    assert point is not None and point.level == "c1" and point.next_failing == "c2"
    assert point.skipped is not None and point.skipped.startswith("c4 met the SLO too, but c2 below it did not")


def test_a_repeated_level_carries_its_throughput_interval_to_the_point() -> None:
    repeated = replace(C4, request_per_s_range=(3.2, 4.0), num_repeats=3)
    point = operating_point([C1, repeated], SLO_1S, 0.95)
    assert point is not None and point.request_per_s_range == (3.2, 4.0) and point.num_repeats == 3
    assert point.output_tokens_per_s_range == (320.0, 400.0)  # 100 output tokens per request


def test_an_slo_on_the_first_visible_token_judges_a_reasoning_model_by_it() -> None:
    """TTFT 200 ms meets a 1 s target, but the first visible word after 1.5 s of reasoning does not."""
    reasoning = replace(C1, ttfvt_p95_ms=1500)
    assert operating_point([reasoning], SLO_1S, 0.95) is not None
    assert operating_point([reasoning], replace(SLO_1S, ttfvt_ms=1000), 0.95) is None
    assert "TTFVT" in replace(SLO_1S, ttfvt_ms=1000).describe(0.95)


def test_a_level_passing_above_a_failing_one_is_skipped_and_said_so() -> None:
    """c1 and c4 pass, c8 fails, c16 passes again (noise, a warm-up effect): the point is c4, and c16 is named."""
    c16 = level("c16", 16, 9.0, 0.97, 900, 80)
    point = operating_point([C1, C4, C8, c16], SLO_1S, 0.95)
    assert point is not None and (point.level, point.next_failing) == ("c4", "c8")
    assert point.skipped == ("c16 met the SLO too, but c8 below it did not: not used (noise or a warm-up effect; "
                             "measure those loads again)")
    assert operating_point([C1, C4, C8], SLO_1S, 0.95).skipped is None


def test_when_the_lowest_level_fails_no_higher_one_is_the_point_and_the_reason_says_why() -> None:
    from costmodel.decide import decide
    from costmodel.inputs import Pricing, Requirements, Traffic
    from costmodel.types import EngineLevels
    from tests.costmodel.test_decide import CATALOG, TODAY

    cold = replace(C1, ttft_p95_ms=2500, slo_attainment=0.5)  # the first level, slow (a cold start)
    assert operating_point([cold, C4], SLO_1S, 0.95) is None
    d = decide([EngineLevels("ref", (cold, C4))], SLO_1S, Traffic(monthly_tokens=3e9),
               Pricing(gpu="h100-sxm", model="llama-3.1-8b"), Requirements(), CATALOG, TODAY)
    reason = d.results[0].no_operating_point_reason
    assert reason.startswith("the lowest level c1 does not meet the SLO (")
    assert "c4 above it did, but a load counts only when every lower one meets the SLO too" in reason
