"""Speculative decoding by prompt lookup (vLLM's `ngram` method): drafts proposed from the request's own tokens,
verified by the model in the step that would have decoded one token.

Contract:
- `propose(token_ids, config, max_drafts)`: the tokens that followed the latest earlier occurrence of the
  sequence's last n tokens (the longest n from prompt_lookup_max down to prompt_lookup_min that occurs), at most
  `max_drafts` of them; none when no suffix occurs again. Copy-heavy answers (edits, quotes, tool loops) find
  their next tokens in the prompt; free chat rarely does.
- The engine computes the last token and its drafts in one row of the step; logits come back for each of them.
  `accepted_tokens(drafts, choices)` keeps the drafts while each equals the model's own greedy choice at the
  position before it, then adds the model's choice after the last one kept: 1 to len(drafts) + 1 tokens, the
  same tokens greedy decoding would have produced one step at a time (only greedy rows are drafted for).
- `SpecDecodeCounters` counts as vLLM counts: drafts (verification rows), draft tokens, accepted tokens, and
  accepted tokens per draft position.
Knows nothing of scheduling, blocks or the model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

METHODS = ("ngram",)


@dataclass(frozen=True)
class SpeculativeConfig:
    """vLLM's --speculative-config for the ngram method: num_speculative_tokens drafts a step at most, from a
    suffix of prompt_lookup_min to prompt_lookup_max tokens found earlier in the sequence."""

    num_speculative_tokens: int
    method: str = "ngram"
    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 4

    def __post_init__(self) -> None:
        def positive(name: str) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"speculative config: {name} must be an integer >= 1, got {value!r}")

        if self.method not in METHODS:
            raise ValueError(f"speculative config: method must be one of {', '.join(METHODS)} (prompt lookup), "
                             f"got {self.method!r}")
        for name in ("num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"):
            positive(name)
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(f"speculative config: prompt_lookup_min ({self.prompt_lookup_min}) must not exceed "
                             f"prompt_lookup_max ({self.prompt_lookup_max})")

    @classmethod
    def from_json(cls, text: str) -> SpeculativeConfig:
        """Parse vLLM's JSON form; an unknown field is refused by name (vLLM's other methods need models)."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"speculative config is not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"speculative config must be a JSON object, got {type(raw).__name__}")
        unknown = sorted(set(raw) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"speculative config: unknown field(s) {', '.join(unknown)}; accepted: "
                             f"{', '.join(cls.__dataclass_fields__)}")
        if "num_speculative_tokens" not in raw:
            raise ValueError("speculative config: num_speculative_tokens is required")
        return cls(**raw)

    def describe(self) -> str:
        return (f"{self.method}, up to {self.num_speculative_tokens} draft tokens a step from a suffix of "
                f"{self.prompt_lookup_min}-{self.prompt_lookup_max} tokens found earlier in the sequence")


def propose(token_ids: Sequence[int], config: SpeculativeConfig, max_drafts: int) -> list[int]:
    """Draft tokens for the next positions of `token_ids`: what followed the latest earlier occurrence of its
    longest matching suffix. Vectorized over the positions holding the last token, so that a long context
    costs microseconds a step, not a Python loop over it."""
    num_drafts = min(config.num_speculative_tokens, max_drafts)
    if num_drafts < 1 or len(token_ids) < 2:
        return []
    tokens = np.asarray(token_ids)
    last = len(tokens) - 1
    ends = np.flatnonzero(tokens[:last] == tokens[last])  # where an earlier occurrence of the suffix may end
    for n in range(min(config.prompt_lookup_max, last), config.prompt_lookup_min - 1, -1):
        found = ends[ends >= n - 1]
        for back in range(1, n):
            found = found[tokens[found - back] == tokens[last - back]]
        if len(found):
            start = int(found[-1]) + 1
            return tokens[start:start + num_drafts].tolist()
    return []


def accepted_tokens(drafts: Sequence[int], choices: Sequence[int]) -> list[int]:
    """The tokens a verified row yields: `choices[i]` is the model's greedy token after the row's i-th token
    (its last real token, then each draft), so len(choices) == len(drafts) + 1."""
    if len(choices) != len(drafts) + 1:
        raise ValueError(f"{len(drafts)} drafts need {len(drafts) + 1} choices, got {len(choices)}")
    kept = 0
    while kept < len(drafts) and drafts[kept] == choices[kept]:
        kept += 1
    return [*drafts[:kept], choices[kept]]


@dataclass
class SpecDecodeCounters:
    """Cumulative, as vLLM's spec_decode counters: a draft is one row verified with at least one draft token."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)

    def record(self, num_draft_tokens: int, num_accepted: int) -> None:
        if num_draft_tokens < 1:
            return
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted
        self.accepted_per_position += [0] * (num_draft_tokens - len(self.accepted_per_position))
        for position in range(num_accepted):
            self.accepted_per_position[position] += 1

    def snapshot(self) -> SpecDecodeCounters:
        return SpecDecodeCounters(self.num_drafts, self.num_draft_tokens, self.num_accepted_tokens,
                                  list(self.accepted_per_position))
