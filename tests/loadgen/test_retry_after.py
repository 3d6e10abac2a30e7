"""How long a 429 asks the client to wait: exact milliseconds, seconds, or an HTTP date."""

from __future__ import annotations

import email.utils
import time

import pytest
from multidict import CIMultiDict

from loadgen.client import retry_after_s


def test_milliseconds_win_over_seconds() -> None:
    assert retry_after_s(CIMultiDict({"retry-after-ms": "250", "Retry-After": "1"})) == 0.25


def test_seconds_may_be_fractional_and_are_never_negative() -> None:
    assert retry_after_s(CIMultiDict({"Retry-After": "2"})) == 2.0
    assert retry_after_s(CIMultiDict({"retry-after": "0.5"})) == 0.5
    assert retry_after_s(CIMultiDict({"Retry-After": "-3"})) == 0.0


def test_an_http_date_is_the_time_until_then() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert retry_after_s(CIMultiDict({"Retry-After": when})) == pytest.approx(30, abs=1.5)


def test_nothing_or_nonsense_says_nothing() -> None:
    assert retry_after_s(CIMultiDict()) is None
    assert retry_after_s(CIMultiDict({"Retry-After": "soon"})) is None
