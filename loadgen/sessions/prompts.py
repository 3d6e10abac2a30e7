"""Prompts for a session's calls, built from their blocks, and the cache hits the blocks imply.

Each block is one fixed text, a function of its agent's scope and its id alone: the scope is the session
(with its replay number: a session replayed again shares nothing with its first replay) and the agent, so
calls share leading text exactly as their hash ids do and nothing else is shared. A block is
`block_tokens` words that are one token each (`loadgen.replay.blocks`); a call's last block is cut to its
length, and blocks past its hash ids are its own. A synthetic workload's shared system prompt is one text
for every session.

The words of many blocks are drawn at once (a splitmix64 hash of the block's key and the word's place), so a
call of 20,000 tokens costs the client well under a millisecond; an agent keeps its blocks' text while it
runs, since every call sends the context so far again.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

from loadgen.datasets import WORDS, PromptTokenizer
from loadgen.replay.blocks import single_token_words
from loadgen.sessions.model import Call

_MASK = (1 << 64) - 1


def words_for(tokenizer: PromptTokenizer | None) -> np.ndarray:
    return np.array(single_token_words(tokenizer) if tokenizer is not None else list(WORDS), dtype=object)


def scope_key(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "big")


def block_texts(scope: int, keys: Sequence[int], block_tokens: int, words: np.ndarray) -> list[str]:
    """The full text of each block `keys[i]` of `scope`."""
    if not keys:
        return []
    base = np.array([(scope * 1_000_003 + (k & _MASK)) & _MASK for k in keys], dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = base[:, None] * np.uint64(0x9E3779B97F4A7C15) + np.arange(1, block_tokens + 1, dtype=np.uint64)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)  # type: ignore[operator]
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    picked = words[(x % np.uint64(len(words))).astype(np.int64)]
    return [" ".join(row) for row in picked]


class AgentPrompts:
    """One agent of one replayed session: its calls' prompts, and how many of each prompt's tokens its own
    earlier prompts already sent (the prefix a cache of this agent's prompts would hold)."""

    def __init__(self, scope: int, block_tokens: int, words: np.ndarray) -> None:
        self.scope, self.block_tokens, self.words = scope, block_tokens, words
        self.texts: dict[int, str] = {}
        self.seen: dict[int, int] = {}  # a prefix's chain of ids -> the most tokens of its last block sent

    def prompt(self, call: Call, step: int, num_tokens: int | None = None) -> tuple[str, int]:
        """(text of `num_tokens` tokens, default the call's input; implied cached tokens)."""
        num_tokens = call.input_tokens if num_tokens is None else num_tokens
        b = self.block_tokens
        num_blocks = math.ceil(num_tokens / b)
        keys = [call.hash_ids[i] if i < len(call.hash_ids) else -((step << 24) + i + 1) for i in range(num_blocks)]
        missing = [k for k in dict.fromkeys(keys) if k not in self.texts]
        self.texts.update(zip(missing, block_texts(self.scope, missing, b, self.words), strict=True))
        sizes = [min(b, num_tokens - i * b) for i in range(num_blocks)]
        parts = [self.texts[k] if size == b else " ".join(self.texts[k].split(" ")[:size])
                 for k, size in zip(keys, sizes, strict=True)]
        return " ".join(parts), self._implied_cached(keys, sizes)

    def _implied_cached(self, keys: list[int], sizes: list[int]) -> int:
        cached, hitting, chain = 0, True, 0
        for key, size in zip(keys, sizes, strict=True):
            chain = hash((chain, key))
            sent = self.seen.get(chain, 0)
            if hitting:
                cached += min(sent, size)
                hitting = sent >= size
            self.seen[chain] = max(sent, size)
        return cached
