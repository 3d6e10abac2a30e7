"""StopMatcher: the stop strings found as text grows piece by piece agree with a plain search of the whole
text, whatever the pieces; the tail it holds back is the longest one that could still grow into a stop."""

from __future__ import annotations

import random

import pytest

from engines.reference.core.stop_strings import StopMatcher


def first_stop(text: str, stops: tuple[str, ...], end_after: int) -> int | None:
    """The earliest start of a stop string that ends after text[:end_after] (plain search, for reference)."""
    starts = [start for stop in stops for start in range(len(text) - len(stop) + 1)
              if text.startswith(stop, start) and start + len(stop) > end_after]  # fmt: skip
    return min(starts) if starts else None


def held_back(text: str, stops: tuple[str, ...]) -> int:
    return max((k for stop in stops for k in range(1, len(stop)) if text.endswith(stop[:k])), default=0)


def test_examples() -> None:
    matcher = StopMatcher(("o w", "ld"))
    assert matcher.feed("hello") is None and matcher.num_held_back_chars == 1  # "o" may begin "o w"
    assert matcher.feed(" wo") == 4
    matcher = StopMatcher(("world", "o"))
    assert matcher.feed("hell") is None and matcher.num_held_back_chars == 0
    assert matcher.feed("o") == 4  # "o" is a stop of its own
    assert StopMatcher(("abcd", "bc")).feed("xabcd") == 1  # both end in the piece: the earliest start wins


def test_no_stops_hold_nothing_back() -> None:
    matcher = StopMatcher(())
    assert matcher.feed("anything") is None and matcher.num_held_back_chars == 0


def test_an_empty_stop_string_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        StopMatcher(("a", ""))


@pytest.mark.parametrize("seed", range(300))
def test_agrees_with_a_plain_search_whatever_the_pieces(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = "ab" if seed % 2 else "abc"  # small alphabets: many partial matches and overlaps
    stops = tuple("".join(rng.choices(alphabet, k=rng.randint(1, 6))) for _ in range(rng.randint(1, 4)))
    text = "".join(rng.choices(alphabet, k=rng.randint(0, 40)))
    matcher, fed = StopMatcher(stops), 0
    while fed < len(text):
        piece = text[fed : fed + rng.randint(1, 4)]
        found = matcher.feed(piece)
        assert found == first_stop(text[: fed + len(piece)], stops, fed), (stops, text, fed)
        if found is not None:
            return
        fed += len(piece)
        assert matcher.num_held_back_chars == held_back(text[:fed], stops), (stops, text[:fed])
