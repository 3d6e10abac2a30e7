"""What a provider does besides streaming, for the scripted server to play: a rate limit (a token bucket)
and a prefix cache whose hits it reports as `cached_tokens`."""

from __future__ import annotations

import time


class TokenBucket:
    """`rate` requests a second on average, `burst` at once; `take` says how long until one is free (0: taken)."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = max(burst, 1.0)
        self.tokens = self.burst
        self.last = time.perf_counter()

    def take(self) -> float:
        if self.rate <= 0:
            return 0.0
        now = time.perf_counter()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


class PrefixCache:
    """Blocks of `block_words` words, each keyed by a hash chained to the block before it (as a paged
    prefix cache keys its blocks). A prompt's cached words are its leading blocks an earlier prompt had."""

    def __init__(self, block_words: int) -> None:
        self.block_words = block_words
        self.blocks: set[int] = set()

    def cached_words(self, words: list[str]) -> int:
        """How many of `words` were cached; the prompt's blocks are kept for later prompts. 0 when off."""
        size = self.block_words
        if not size:
            return 0
        cached, parent, is_hit = 0, 0, True
        for start in range(0, len(words) - size + 1, size):
            parent = hash((parent, *words[start : start + size]))
            if is_hit and parent in self.blocks:
                cached += size
            else:
                is_hit = False
                self.blocks.add(parent)
        return cached
