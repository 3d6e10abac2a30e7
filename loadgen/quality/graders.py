"""Graders: is an answer right? Each takes the accepted answers and the answer the server gave.

- exact: equal to one accepted answer after trimming and case folding (inner runs of spaces count as one,
  and a trailing full stop is dropped: "Paris." is "paris").
- contains: one accepted answer appears in it, case folded.
- number: the first number in the answer (a sign, thousands commas and decimals allowed) equals an accepted
  one.
- choice: the first standalone letter A-J in the answer (not part of a word) is the accepted letter; the
  pronoun ("I think ...": an I followed by a lower-case word) is not a choice.
- regex: one accepted pattern matches somewhere in the answer (case insensitive).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Literal

GraderName = Literal["exact", "contains", "number", "choice", "regex"]
GRADERS: tuple[GraderName, ...] = ("exact", "contains", "number", "choice", "regex")

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
    return any(re.search(pattern, answer, flags=re.IGNORECASE) for pattern in accepted)


_BY_NAME: dict[str, Callable[[Sequence[str], str], bool]] = {
    "exact": _exact, "contains": _contains, "number": _number, "choice": _choice, "regex": _regex}


def grade(grader: str, accepted: Sequence[str], answer: str) -> bool:
    return _BY_NAME[grader](accepted, answer)


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
                re.compile(pattern)
            except re.error as exc:
                return f"answer {pattern!r} is not a valid regular expression ({exc})"
    return None
