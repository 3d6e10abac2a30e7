"""Accuracy in the decision (COSTMODEL.md, "Quality"): an option whose 95 % interval lies below
requirements.min_accuracy can't win; one whose interval holds the floor wins with a warning; the cost per correct
answer is the cost per request over the accuracy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.accuracy import Accuracy
from costmodel.decide import decide
from costmodel.inputs import Pricing, Requirements, Traffic
from costmodel.types import EngineLevels, LatencyLimits
from tests.costmodel.test_decide import EXAMPLES, H100_AT_2_99, TODAY, one_level

PRICING = Pricing(**H100_AT_2_99, ops_usd_per_month=0, providers=["together/llama-3.3-70b"])  # type: ignore[arg-type]
TRAFFIC = Traffic(monthly_tokens=50e9, peak_to_average=1.5)


def engine(name: str, tokens_per_s: float, accuracy: Accuracy | None) -> EngineLevels:
    return replace(one_level(tokens_per_s), engine=name, accuracy=accuracy)


def test_the_cheaper_option_below_the_floor_cannot_win_and_the_verdict_says_so() -> None:
    cheap = engine("int4", 2400, Accuracy(0.40, 0.35, 0.46, 300))
    good = engine("bf16", 1500, Accuracy(0.70, 0.65, 0.75, 300))
    free = decide([cheap, good], LatencyLimits(), TRAFFIC, PRICING, Requirements(), EXAMPLES, TODAY)
    assert free.best.engine == "int4"  # without a floor the cheapest wins, its accuracy shown
    assert any("int4 answers the eval right 40%" in line for line in free.verdict.lines)
    floored = decide([cheap, good], LatencyLimits(), TRAFFIC, PRICING, Requirements(min_accuracy=0.6), EXAMPLES,
                     TODAY)
    assert floored.best.engine == "bf16"
    assert any("int4 can't win: its accuracy 40% (95 % interval 35-46%, 300 graded) lies below the required 60%"
               in line for line in floored.verdict.lines)
    best = floored.best
    assert best.accuracy == good.accuracy
    assert best.usd_per_correct_answer == pytest.approx(best.usd_per_request / 0.70)
    assert any("per correct answer" in line for line in floored.verdict.lines)


def test_a_floor_inside_the_winners_interval_wins_with_a_warning_and_an_unmeasured_one_is_named() -> None:
    near = engine("int8", 2400, Accuracy(0.62, 0.56, 0.68, 300))
    d = decide([near], LatencyLimits(), TRAFFIC, PRICING, Requirements(min_accuracy=0.6), EXAMPLES, TODAY)
    assert d.best.engine == "int8"
    assert any(line.startswith("Warning: int8's accuracy interval holds the required 60%") for line in d.verdict.lines)
    unmeasured = decide([engine("x", 2400, None)], LatencyLimits(), TRAFFIC, PRICING,
                        Requirements(min_accuracy=0.6), EXAMPLES, TODAY)
    assert unmeasured.best.engine == "x"
    assert any("accuracy was not measured" in line for line in unmeasured.verdict.lines)


def test_when_no_self_hosted_option_reaches_the_floor_the_answer_is_to_pay_per_token() -> None:
    weak = engine("int4", 1500, Accuracy(0.40, 0.35, 0.46, 300))
    d = decide([weak], LatencyLimits(), TRAFFIC, PRICING, Requirements(min_accuracy=0.6), EXAMPLES, TODAY)
    assert d.best is None and d.verdict.answer == "pay-per-token"
    assert "no self-hosted option reaches the required accuracy of 60%" in d.verdict.headline
    assert any("bench quality --engine endpoint" in line for line in d.verdict.lines)
    required = decide([weak], LatencyLimits(), TRAFFIC, PRICING,
                      Requirements(min_accuracy=0.6, data_must_stay_on_premises=True), EXAMPLES, TODAY)
    assert required.verdict.answer == "self-host-required" and "required accuracy" in required.verdict.headline


def test_a_floor_outside_zero_to_one_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="min_accuracy"):
        Requirements(min_accuracy=60)
