"""One request's state inside the engine: its tokens, how many are in the KV cache, its blocks.

A `Sequence` is plain mutable state. The scheduler and block manager change it (status, block_table,
num_computed_tokens, num_cached_tokens, num_preemptions, arrival_index); the engine appends sampled
tokens through `Scheduler.postprocess`. It knows nothing about sampling: `sampling_params` is an opaque
object the engine sets and reads.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """Per-request state. Identity equality: two sequences are never interchangeable.

    token_ids: prompt followed by generated tokens.
    num_computed_tokens: leading tokens whose K/V are in the cache (block_table covers them).
    num_cached_tokens: prompt tokens served by the prefix cache at first admission (reported to the
        client as cached_tokens); a recompute after preemption does not change it.
    block_table: KV block ids, block i holds tokens [i * block_size, (i + 1) * block_size).
    arrival_index: stamped by the scheduler that queued it (`Scheduler.add`), in that scheduler's order of
        arrival; a lower index arrived earlier. None until then.
    adapter: the name of the LoRA adapter it runs, None for the base model.
    draft_token_ids: tokens proposed for the positions after token_ids (speculative decoding), verified in the
        next step and cleared after it; never part of token_ids until accepted.
    """

    request_id: str
    token_ids: list[int]
    sampling_params: Any = None
    adapter: str | None = None
    num_prompt_tokens: int = field(init=False)
    num_computed_tokens: int = field(default=0, init=False)
    num_cached_tokens: int = field(default=0, init=False)
    num_preemptions: int = field(default=0, init=False)
    block_table: list[int] = field(default_factory=list, init=False)
    status: SequenceStatus = field(default=SequenceStatus.WAITING, init=False)
    arrival_index: int | None = field(default=None, init=False)
    draft_token_ids: list[int] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if not self.token_ids:
            raise ValueError(f"Sequence {self.request_id!r}: token_ids must hold at least one prompt token")
        self.token_ids = list(self.token_ids)
        self.num_prompt_tokens = len(self.token_ids)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens."""
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_uncomputed_tokens(self) -> int:
        """Tokens whose K/V still have to be computed (1 for a decoding sequence)."""
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED
