"""Prompts synthesized for a trace: text of the trace's lengths whose shared blocks are shared exactly.

A trace gives each request's input length and one hash id per block of `block_tokens` tokens (Mooncake:
512); two requests whose ids agree on the first k blocks had the same first k blocks of prompt. So each
hash id maps to one fixed block of text, seeded by the id, and a prompt is its blocks in order, the last
one cut to the length: a prefix cache sees exactly the trace's reuse. A request with fewer ids than
blocks (or none, as in Azure's traces) gets blocks of its own for the rest.

Blocks are made of words that are one token each (with the tokenizer, when one is given: a word is kept
only if, after a space, it is a single token), so a block of n words is n tokens and blocks join without
changing each other's tokens.
"""

from __future__ import annotations

import math

import numpy as np

from loadgen.datasets import WORDS, PromptTokenizer


class BlockPrompts:
    def __init__(self, block_tokens: int, seed: int, tokenizer: PromptTokenizer | None = None) -> None:
        self.block_tokens = block_tokens
        self.seed = seed
        self.words = single_token_words(tokenizer) if tokenizer is not None else list(WORDS)

    def prompt(self, input_tokens: int, hash_ids: tuple[int, ...], request_key: int) -> str:
        """`input_tokens` tokens of text: the blocks of `hash_ids`, then blocks unique to `request_key`."""
        num_blocks = math.ceil(input_tokens / self.block_tokens)
        words: list[str] = []
        for i in range(num_blocks):
            key = (0, hash_ids[i]) if i < len(hash_ids) else (1, request_key, i)
            words += self._block(key)[: min(self.block_tokens, input_tokens - i * self.block_tokens)]
        return " ".join(words)

    def blocks_of(self, prompt: str) -> list[str]:
        """The prompt cut back into its blocks (for checks: which blocks two prompts share)."""
        words = prompt.split(" ")
        return [" ".join(words[i : i + self.block_tokens]) for i in range(0, len(words), self.block_tokens)]

    def _block(self, key: tuple[int, ...]) -> list[str]:
        """Made again each time it is needed (tens of microseconds): a trace can name millions of blocks."""
        rng = np.random.default_rng([self.seed, 2, *(abs(k) for k in key), int(min(key) < 0)])
        return [self.words[i] for i in rng.integers(0, len(self.words), size=self.block_tokens)]


def single_token_words(tokenizer: PromptTokenizer) -> list[str]:
    words = [w for w in WORDS if tokenizer.count(" " + w) == 1]
    if len(words) < 16:
        raise ValueError("the tokenizer splits nearly every common English word into several tokens; prompts of "
                         "exact lengths can't be built from it")
    return words
