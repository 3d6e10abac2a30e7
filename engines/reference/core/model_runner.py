"""Turn one scheduled batch into flat tensors, run the model, return each item's next-token logits.

Contract: the scheduler has already allocated blocks, so each item's block_table covers
num_computed_tokens + num_new_tokens tokens; the runner writes the new tokens' K/V into those slots and
never allocates, frees or reorders blocks. It knows nothing of requests, sampling or tokenization. Between steps
it keeps nothing but a cache of LoRA adapters' stacked weights (`core/lora.py`'s `StackCache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engines.reference.core.attention import AttentionMetadata, KVCache
from engines.reference.core.lora import LoraAdapter, LoraBatch, StackCache
from engines.reference.core.model import LlamaModel


@dataclass(frozen=True)
class BatchItem:
    """One sequence's share of a step: compute (token_ids + draft_token_ids)[num_computed : num_computed + num_new].
    With drafts, the step ends at the last draft and wants logits after the last real token and each draft."""

    token_ids: Sequence[int]  # the whole sequence so far (prompt + generated)
    num_computed_tokens: int  # already in the KV cache
    num_new_tokens: int  # computed this step (drafts included)
    block_table: Sequence[int]  # block ids covering at least num_computed + num_new tokens
    adapter: LoraAdapter | None = None  # the LoRA adapter its rows run, None for the base model
    draft_token_ids: Sequence[int] = ()  # speculative decoding: tokens proposed after token_ids, verified here

    def __post_init__(self) -> None:
        if self.num_computed_tokens < 0 or self.num_new_tokens < 1:
            raise ValueError("BatchItem needs num_computed_tokens >= 0 and num_new_tokens >= 1")
        if self.num_computed_tokens + self.num_new_tokens > len(self.token_ids) + len(self.draft_token_ids):
            raise ValueError(
                f"BatchItem: num_computed_tokens + num_new_tokens "
                f"({self.num_computed_tokens} + {self.num_new_tokens}) exceeds "
                f"len(token_ids) ({len(self.token_ids)}) + drafts ({len(self.draft_token_ids)})"
            )
        if self.draft_token_ids and self.context_len != len(self.token_ids) + len(self.draft_token_ids):
            raise ValueError("BatchItem: a step with drafts computes the sequence's last token and every draft")

    @property
    def context_len(self) -> int:
        return self.num_computed_tokens + self.num_new_tokens

    @property
    def num_logits(self) -> int:
        return 1 + len(self.draft_token_ids)


class ModelRunner:
    """Owns the model and its KV cache on one device; stateless between steps but for the adapters' stacks."""

    def __init__(
        self, model: LlamaModel, kv_cache: KVCache, block_size: int, device: torch.device | str | None = None
    ) -> None:
        if kv_cache.block_size != block_size:
            raise ValueError(f"block_size {block_size} differs from the KV cache's {kv_cache.block_size}")
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.device = torch.device(device) if device is not None else model.device
        self.lora_stacks = StackCache()  # built once per set of adapters, not per step

    def prepare(self, items: Sequence[BatchItem]) -> tuple[torch.Tensor, AttentionMetadata]:
        """Flat input ids (T,) and the attention metadata for a batch."""
        if not items:
            raise ValueError("ModelRunner.run needs at least one BatchItem")
        input_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        bs = self.block_size
        for item in items:
            table = item.block_table
            if len(table) * bs < item.context_len:
                raise ValueError(f"block_table of {len(table)} blocks cannot hold {item.context_len} tokens")
            span = range(item.num_computed_tokens, item.context_len)
            input_ids.extend(item.token_ids[item.num_computed_tokens : item.context_len])
            input_ids.extend(item.draft_token_ids)
            positions.extend(span)
            slots.extend(table[p // bs] * bs + p % bs for p in span)
        meta = AttentionMetadata(
            positions=torch.tensor(positions, dtype=torch.long, device=self.device),
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=self.device),
            query_lens=[item.num_new_tokens for item in items],
            context_lens=[item.context_len for item in items],
            block_tables=[list(item.block_table) for item in items],
            num_logits=[item.num_logits for item in items] if any(item.draft_token_ids for item in items) else None,
        )
        return torch.tensor(input_ids, dtype=torch.long, device=self.device), meta

    @torch.inference_mode()
    def run(self, items: Sequence[BatchItem]) -> torch.Tensor:
        """Logits (sum of num_logits, vocab), float32: of each item's last new token (one row an item without
        drafts), or of its last real token and each draft, in item order."""
        input_ids, meta = self.prepare(items)
        spans = [(item.adapter, item.num_new_tokens) for item in items]
        lora = LoraBatch.from_spans(spans, self.device, self.lora_stacks)
        return self.model(input_ids, meta, self.kv_cache, lora)
