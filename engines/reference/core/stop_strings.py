"""Stop strings found in a request's text as it grows, a piece at a time.

`StopMatcher(stops)` keeps, for each stop string, how long a prefix of it the text fed so far ends with
(Knuth-Morris-Pratt). Feeding a token's text costs O(its characters x the number of stops), amortized over
the request (a single piece at most O(the stops' total length)); the tail that may still grow into a stop
string is known without looking back. Why: comparing every prefix of every stop string with the text's tail
at each token cost O(sum of stop lengths squared) per token on the one step thread, so one request with long
stop strings slowed every other user's tokens. Knows nothing of tokens, detokenization or min_tokens.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=64)
def _borders(stop: str) -> tuple[int, ...]:
    """For each prefix length k >= 1 of `stop`, the length of stop[:k]'s longest proper border (prefix that
    is also a suffix); `_borders(s)[k - 1]`. Cached: a client repeating one long stop list pays once."""
    borders = [0] * len(stop)
    length = 0
    for index in range(1, len(stop)):
        while length and stop[index] != stop[length]:
            length = borders[length - 1]
        if stop[index] == stop[length]:
            length += 1
        borders[index] = length
    return tuple(borders)


class StopMatcher:
    """The text of one request, fed in order; where a stop string first ends, and how much tail to hold back."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        if not all(stops):
            raise ValueError("StopMatcher: stop strings must be non-empty")
        self.stops = stops
        self._borders = [_borders(stop) for stop in stops]
        self._num_matched = [0] * len(stops)  # per stop: the longest prefix of it the text ends with
        self._num_fed_chars = 0

    @property
    def num_held_back_chars(self) -> int:
        """Length of the longest tail of the text fed that is a proper prefix of some stop string."""
        return max(self._num_matched, default=0)

    def feed(self, text: str) -> int | None:
        """Take the next piece of text; returns where (an index into all text fed) the earliest stop string
        that ends inside this piece begins, or None."""
        offset = self._num_fed_chars
        earliest: int | None = None
        for index, stop in enumerate(self.stops):
            borders, matched = self._borders[index], self._num_matched[index]
            for position, char in enumerate(text):
                while matched and stop[matched] != char:
                    matched = borders[matched - 1]
                if stop[matched] == char:
                    matched += 1
                if matched == len(stop):
                    start = offset + position + 1 - len(stop)
                    earliest = start if earliest is None else min(earliest, start)
                    matched = borders[matched - 1]  # go on: the caller may not act on this one (min_tokens)
            self._num_matched[index] = matched
        self._num_fed_chars += len(text)
        return earliest
