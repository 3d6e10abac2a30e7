"""Every grader against hand-written cases, near misses included."""

from __future__ import annotations

import pytest

from loadgen.quality.graders import REGEX_TIMEOUT_S, check_answer, grade, judge
from loadgen.runner import graded
from loadgen.types import Grading, RequestRecord, RequestSpec


@pytest.mark.parametrize(("grader", "accepted", "answer", "right"), [
    ("exact", ["Paris"], "  paris. ", True),
    ("exact", ["Paris"], "Paris, France", False),  # near miss: more than the answer
    ("exact", ["New York", "NYC"], "new   york", True),
    ("exact", ["Paris"], "Pariss", False),
    ("contains", ["Paris"], "The capital of France is PARIS.", True),
    ("contains", ["Paris"], "The capital is Lyon.", False),
    ("number", ["42"], "The answer is 42 apples, not 43.", True),
    ("number", ["42"], "43, then 42", False),  # the first number is the answer
    ("number", ["1234"], "That makes 1,234.", True),
    ("number", ["-3.5"], "It is -3.50 degrees", True),
    ("number", ["12"], "twelve", False),
    ("number", ["0.5"], "about .5", True),
    ("choice", ["B"], "B) because it is larger", True),
    ("choice", ["B"], "Because the answer is B", True),  # the B of "Because" is part of a word
    ("choice", ["B"], "Not A, I'd say B", False),  # the first standalone letter is A
    ("choice", ["C"], "I think (C).", True),  # the pronoun is not choice I
    ("choice", ["I"], "I.", True),
    ("choice", ["C"], "Answer: A, then C", False),
    ("regex", [r"\bparis\b"], "It's Paris!", True),
    ("regex", [r"^\d{4}$"], "1969.", False),
])
def test_each_grader_on_hand_written_cases(grader, accepted, answer, right) -> None:
    assert grade(grader, accepted, answer) is right


def test_an_answer_a_grader_cannot_check_is_named() -> None:
    assert check_answer("exact", ["Paris"]) is None
    assert "not one of" in (check_answer("fuzzy", ["x"]) or "")
    assert "must hold a number" in (check_answer("number", ["many"]) or "")
    assert "letter A-J" in (check_answer("choice", ["K"]) or "")
    assert "regular expression" in (check_answer("regex", ["(unclosed"]) or "")
    assert "non-empty" in (check_answer("contains", [""]) or "")


CATASTROPHIC = r"(a|aa)+$"  # against "aaaa...b": Python's re backtracks for ages (hours at 60 a's)


@pytest.mark.timeout(60)  # the attack: without a time limit this test hangs
def test_a_dataset_regex_that_backtracks_forever_leaves_the_line_not_graded_with_a_note() -> None:
    answer = "a" * 60 + "b"
    assert check_answer("regex", [CATASTROPHIC]) is None  # a valid pattern: refused only by its time
    verdict = judge("regex", [CATASTROPHIC], answer)
    assert verdict.correct is None
    assert verdict.note is not None and "not graded" in verdict.note and CATASTROPHIC in verdict.note
    assert f"more than {REGEX_TIMEOUT_S:g} s" in verdict.note
    assert grade("regex", [CATASTROPHIC, r"b$"], answer) is True  # another pattern that matches still counts
    assert grade("regex", [r"(a+)+$"], answer) is False  # the textbook case: the regex package is not fooled


@pytest.mark.timeout(60)
def test_a_graded_record_whose_pattern_timed_out_is_not_graded_and_says_why() -> None:
    spec = RequestSpec(0, "chat", "say a's", 64, grading=Grading("regex", (CATASTROPHIC,)))
    record = RequestRecord("run", "e", "c1", 0, 0.0, ok=True, output_text="a" * 60 + "b")
    graded(spec, record)
    assert record.ok and record.correct is None  # the server answered; the grader could not judge it
    assert record.error_message is not None and "not graded: regex" in record.error_message
    right = RequestRecord("run", "e", "c1", 1, 0.0, ok=True, output_text="aaaa")
    assert graded(spec, right).correct is True and right.error_message is None
