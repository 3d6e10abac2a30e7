"""Seeded synthetic requests: prompts of a requested token length, and shared-prefix groups.

Prompts are built from common English words. With a tokenizer (a `tokenizer.json`) a prompt is cut at
exactly the requested token count; without one, each word stands for about one token. Either way the
true count comes back in the server's usage and is what the metrics use.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np

from loadgen.types import RequestSpec
from loadgen.workload import Workload

WORDS = (
    "the of and to in is it you that he was for on are with as his they be at one have this from or had "
    "by word but what some we can out other were all there when up use your how said an each she which do "
    "their time if will way about many then them write would like so these her long make thing see him "
    "two has look more day could go come did number sound no most people my over know water than call "
    "first who may down side been now find any new work part take get place made live where after back "
    "little only round man year came show every good me give our under name very through just form "
    "sentence great think say help low line differ turn cause much mean before move right boy old too "
    "same tell does set three want air well also play small end put home read hand port large spell add "
    "even land here must big high such follow act why ask men change went light kind off need house "
    "picture try us again animal point mother world near build self earth father head stand own page"
).split()


class PromptTokenizer(Protocol):
    def count_and_cut(self, text: str, num_tokens: int) -> tuple[str, int]: ...

    def count(self, text: str) -> int: ...


class TokenizerFile:
    """A Hugging Face `tokenizer.json`, used to cut prompts at an exact token count."""

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer  # optional dependency, only when a tokenizer is given

        self._tokenizer = Tokenizer.from_file(str(path))

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_and_cut(self, text: str, num_tokens: int) -> tuple[str, int]:
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        if len(encoding.ids) <= num_tokens:
            return text, len(encoding.ids)
        return text[: encoding.offsets[num_tokens - 1][1]], num_tokens


def random_text(rng: np.random.Generator, num_words: int) -> str:
    picks = rng.integers(0, len(WORDS), size=num_words).tolist()
    return " ".join([WORDS[i] for i in picks])


def make_prompt(rng: np.random.Generator, num_tokens: int, tokenizer: PromptTokenizer | None) -> str:
    if tokenizer is None:
        return random_text(rng, num_tokens)
    num_words = num_tokens
    while True:
        text, count = tokenizer.count_and_cut(random_text(rng, num_words), num_tokens)
        if count >= num_tokens:
            return text
        num_words += max(8, num_tokens - count)


def iter_requests(workload: Workload, tokenizer: PromptTokenizer | None = None) -> Iterator[RequestSpec]:
    """An endless, seeded stream of requests; the same workload gives the same stream. In a multi-turn
    workload, each conversation's turns come one after another (the runner adds each turn's history), and
    a conversation keeps one system prompt."""
    rng = np.random.default_rng(workload.seed)
    system_prompts = _system_prompts(workload, tokenizer)
    turns = workload.multi_turn.turns if workload.multi_turn else None
    request_id = 0
    while True:
        batch = 256
        input_lengths = workload.input_tokens.sample(rng, batch)
        output_lengths = workload.output_tokens.sample(rng, batch)
        for num_in, num_out in zip(input_lengths, output_lengths, strict=True):
            conversation = request_id // turns if turns else None
            group = conversation if conversation is not None else request_id
            system = system_prompts[group % len(system_prompts)] if system_prompts else None
            yield RequestSpec(
                request_id=request_id,
                api=workload.api,
                prompt=make_prompt(rng, int(num_in), tokenizer),
                max_tokens=int(num_out),
                system_prompt=system,
                input_tokens_target=int(num_in),
                conversation_id=conversation,
                turn=request_id % turns + 1 if turns else None,
            )
            request_id += 1


def _system_prompts(workload: Workload, tokenizer: PromptTokenizer | None) -> list[str]:
    if workload.shared_prefix is None:
        return []
    rng = np.random.default_rng([workload.seed, 1])
    prefix = workload.shared_prefix
    return [make_prompt(rng, prefix.tokens, tokenizer) for _ in range(prefix.groups)]
