"""Validity in the decision: an option whose shaped answers' 95 % interval lies below requirements.min_validity
can't win, as with accuracy; the winner's validity and its invalid answers by fault are said."""

from __future__ import annotations

from dataclasses import replace

from common.accuracy import Validity
from costmodel.decide import decide
from costmodel.inputs import Requirements
from costmodel.types import EngineLevels, LatencyLimits
from tests.costmodel.test_accuracy_floor import PRICING, TRAFFIC
from tests.costmodel.test_decide import EXAMPLES, TODAY, one_level


def engine(name: str, tokens_per_s: float, validity: Validity | None) -> EngineLevels:
    return replace(one_level(tokens_per_s), engine=name, validity=validity)


def test_the_cheaper_option_with_invalid_answers_cannot_win_and_the_verdict_says_why() -> None:
    loose = engine("free-decoding", 2400, Validity(0.80, 0.75, 0.84, 300, {"schema": 40, "cut": 20}))
    strict = engine("grammar", 1500, Validity(1.0, 0.99, 1.0, 300))
    free = decide([loose, strict], LatencyLimits(), TRAFFIC, PRICING, Requirements(), EXAMPLES, TODAY)
    assert free.best.engine == "free-decoding"
    assert any("free-decoding's shaped answers: 80% valid (95 % interval 75-84%, 300 judged); invalid: schema 40, "
               "cut 20." == line for line in free.verdict.lines)
    floored = decide([loose, strict], LatencyLimits(), TRAFFIC, PRICING, Requirements(min_validity=0.95), EXAMPLES,
                     TODAY)
    assert floored.best.engine == "grammar" and floored.best.validity == strict.validity
    assert any("free-decoding can't win: its answers are 80% valid" in line for line in floored.verdict.lines)


def test_when_every_option_is_below_the_floor_the_answer_is_to_pay_per_token() -> None:
    loose = engine("free-decoding", 2400, Validity(0.80, 0.75, 0.84, 300))
    d = decide([loose], LatencyLimits(), TRAFFIC, PRICING, Requirements(min_validity=0.95), EXAMPLES, TODAY)
    assert d.best is None and d.verdict.answer == "pay-per-token"
    assert "no self-hosted option reaches the required validity of 95% for its shaped answers" in d.verdict.headline
    unjudged = decide([engine("x", 2400, None)], LatencyLimits(), TRAFFIC, PRICING, Requirements(min_validity=0.95),
                      EXAMPLES, TODAY)
    assert unjudged.best.engine == "x"
    assert any("were not judged for their shape" in line for line in unjudged.verdict.lines)
