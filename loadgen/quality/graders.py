"""Graders: is an answer right? Each takes the accepted answers and the answer the server gave.

- exact: equal to one accepted answer after trimming and case folding (inner runs of spaces count as one,
  and a trailing full stop is dropped: "Paris." is "paris").
- contains: one accepted answer appears in it, case folded.
- number: the first number in the answer (a sign, thousands commas and decimals allowed) equals an accepted
  one.
- choice: the first standalone letter A-J in the answer (not part of a word) is the accepted letter; the
  pronoun ("I think ...": an I followed by a lower-case word) is not a choice.
- regex: one accepted pattern matches somewhere in the answer (case insensitive). The pattern comes from the
  dataset, so it runs with a time limit (REGEX_TIMEOUT_S, the `regex` package's): one that backtracks past it
  (`(a|aa)+$` against "aaaa...b") leaves the line not graded, with a note that says so, and never hangs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import regex

GraderName = Literal["exact", "contains", "number", "choice", "regex"]
GRADERS: tuple[GraderName, ...] = ("exact", "contains", "number", "choice", "regex")
REGEX_TIMEOUT_S = 0.05  # one pattern against one answer: a sane pattern takes microseconds


@dataclass(frozen=True)
class Grade:
    """An answer judged: right or wrong, or None when it could not be graded (`note` says why)."""

    correct: bool | None
    note: str | None = None


class _NotGraded(Exception):
    """A grader that could not judge the answer; the message is the note."""

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")
_CHOICE = re.compile(r"(?<![A-Za-z'])([A-J])(?![A-Za-z'])(?!(?<=I) [a-z])")  # "I think" is not choice I


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold().removesuffix(".")


def first_number(text: str) -> float | None:
    match = _NUMBER.search(text)
    return float(match.group().replace(",", "")) if match else None


def first_choice(text: str) -> str | None:
    match = _CHOICE.search(text)
    return match.group(1) if match else None


def _exact(accepted: Sequence[str], answer: str) -> bool:
    return _normal(answer) in {_normal(a) for a in accepted}


def _contains(accepted: Sequence[str], answer: str) -> bool:
    folded = answer.casefold()
    return any(a.casefold() in folded for a in accepted)


def _number(accepted: Sequence[str], answer: str) -> bool:
    said = first_number(answer)
    wanted = [first_number(a) for a in accepted]
    return said is not None and any(w is not None and math.isclose(said, w, rel_tol=1e-9, abs_tol=1e-9)
                                    for w in wanted)


def _choice(accepted: Sequence[str], answer: str) -> bool:
    said = first_choice(answer)
    return said is not None and said in {a.strip().upper() for a in accepted}


def _regex(accepted: Sequence[str], answer: str) -> bool:
    """Right when a pattern matches; a pattern that ran out of time is not a no: unless another one matches, the
    line is not graded."""
    timed_out = []
    for pattern in accepted:
        try:
            if regex.search(pattern, answer, flags=regex.IGNORECASE, timeout=REGEX_TIMEOUT_S):
                return True
        except TimeoutError:
            timed_out.append(pattern)
    if timed_out:
        raise _NotGraded(f"not graded: regex {timed_out[0][:80]!r} took more than {REGEX_TIMEOUT_S:g} s against "
                         f"the answer ({len(answer)} characters), the limit a dataset's pattern is given")
    return False


_BY_NAME: dict[str, Callable[[Sequence[str], str], bool]] = {
    "exact": _exact, "contains": _contains, "number": _number, "choice": _choice, "regex": _regex}


def judge(grader: str, accepted: Sequence[str], answer: str) -> Grade:
    """The answer judged by `grader`, or not graded with a note (a regex that ran out of time)."""
    try:
        return Grade(_BY_NAME[grader](accepted, answer))
    except _NotGraded as exc:
        return Grade(None, str(exc))


def grade(grader: str, accepted: Sequence[str], answer: str) -> bool | None:
    """Whether the answer is right; None when it could not be graded (`judge` says why)."""
    return judge(grader, accepted, answer).correct


def check_answer(grader: str, accepted: Sequence[str]) -> str | None:
    """Why `accepted` can't be graded by `grader` (None: it can): what a dataset line is refused for."""
    if grader not in _BY_NAME:
        return f"grader {grader!r} is not one of {', '.join(GRADERS)}"
    if not accepted or not all(isinstance(a, str) and a.strip() for a in accepted):
        return "answer must be a non-empty string or a list of them"
    if grader == "number" and any(first_number(a) is None for a in accepted):
        return "a number grader's answer must hold a number"
    if grader == "choice" and any(a.strip().upper() not in "ABCDEFGHIJ" or len(a.strip()) != 1 for a in accepted):
        return "a choice grader's answer must be a letter A-J"
    if grader == "regex":
        for pattern in accepted:
            try:
                regex.compile(pattern)
            except regex.error as exc:
                return f"answer {pattern!r} is not a valid regular expression ({exc})"
    return None
