"""Paged KV cache bookkeeping: fixed-size blocks, a free list, reference counts.

Every block is in exactly one state: on the free list (reference count 0, not cached), referenced by
one or more sequences (count >= 1), or cached and unreferenced (count 0, evictable, least recently
released first). A sequence gets blocks for all its known tokens at admission (`allocate`, reusing
cached prefix blocks), one more block when a generated token crosses a block boundary
(`append_slot`), and gives them all back on finish, abort or preemption (`free`). Speculative decoding
reserves slots for draft tokens too (`append_slot`'s lookahead) and gives back those its rejected drafts
held (`trim`): their K/V, written past the sequence's tokens, is overwritten when those positions are computed.

This module holds no K/V tensors: block ids index the model runner's cache. It never changes a
sequence's tokens or status.
"""

from __future__ import annotations

from collections import deque

from engines.reference.core.prefix_cache import BlockHashFn, PrefixCache, chain_hash
from engines.reference.core.sequence import Sequence


class OutOfBlocksError(RuntimeError):
    """A commit was called although its check (`can_allocate` / `can_append`) said no."""


class BlockManager:
    """Reference-counted KV blocks with a prefix cache of full blocks.

    Changes: reference counts, the free list, the prefix cache, and of a sequence only block_table,
    num_computed_tokens and num_cached_tokens. Never changes token_ids or status.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = True,
        hash_fn: BlockHashFn = chain_hash,
    ) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {num_blocks} and {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.prefix_cache = PrefixCache(block_size, hash_fn)
        self._ref_counts = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    # ---- read-only views -------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        """Blocks a new allocation may take: the free list plus evictable cached blocks."""
        return len(self._free) + self.prefix_cache.num_evictable_blocks

    @property
    def num_used_blocks(self) -> int:
        """Blocks referenced by at least one sequence."""
        return self.num_blocks - self.num_free_blocks

    @property
    def kv_cache_usage_perc(self) -> float:
        """Fraction (0..1) of blocks referenced by sequences, like vllm:kv_cache_usage_perc."""
        return self.num_used_blocks / self.num_blocks

    def ref_count(self, block_id: int) -> int:
        return self._ref_counts[block_id]

    def num_blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold `num_tokens` token slots."""
        return -(-num_tokens // self.block_size)

    # ---- admission: check, then commit ----------------------------------------------------------

    def _match_prefix(self, seq: Sequence) -> tuple[int, ...]:
        if not self.enable_prefix_caching:
            return ()
        # The last token is always computed: the model needs its logits.
        return self.prefix_cache.match(seq.token_ids, (seq.num_tokens - 1) // self.block_size, seq.adapter)

    def _num_blocks_to_take(self, seq: Sequence, hits: tuple[int, ...]) -> int:
        num_revived = sum(1 for block_id in hits if self._ref_counts[block_id] == 0)
        return self.num_blocks_for(seq.num_tokens) - len(hits) + num_revived

    def can_allocate(self, seq: Sequence) -> bool:
        """Whether `allocate(seq)` would succeed now. Changes nothing."""
        return self._num_blocks_to_take(seq, self._match_prefix(seq)) <= self.num_free_blocks

    def allocate(self, seq: Sequence) -> None:
        """Give a block-less sequence blocks for all its tokens, reusing cached prefix blocks.

        Sets block_table, num_computed_tokens (= cached prefix tokens) and, at first admission,
        num_cached_tokens and the prefix-cache counters. Raises OutOfBlocksError if `can_allocate` is False.
        """
        if seq.block_table:
            raise ValueError(f"sequence {seq.request_id!r} already holds blocks")
        hits = self._match_prefix(seq)
        if self._num_blocks_to_take(seq, hits) > self.num_free_blocks:
            raise OutOfBlocksError(f"not enough free KV blocks for sequence {seq.request_id!r}")
        for block_id in hits:
            self._acquire(block_id)
        num_new_blocks = self.num_blocks_for(seq.num_tokens) - len(hits)
        seq.block_table = list(hits) + [self._take_free_block() for _ in range(num_new_blocks)]
        num_hit_tokens = len(hits) * self.block_size
        seq.num_computed_tokens = num_hit_tokens
        if seq.num_preemptions == 0:
            seq.num_cached_tokens = num_hit_tokens
            if self.enable_prefix_caching:
                self.prefix_cache.record_query(seq.num_tokens, num_hit_tokens)

    # ---- growth: check, then commit -------------------------------------------------------------

    def _num_missing_blocks(self, seq: Sequence, num_lookahead: int) -> int:
        return max(0, self.num_blocks_for(seq.num_tokens + num_lookahead) - len(seq.block_table))

    def can_append(self, seq: Sequence, num_lookahead: int = 0) -> bool:
        """Whether `append_slot(seq, num_lookahead)` would succeed now. Changes nothing."""
        return self._num_missing_blocks(seq, num_lookahead) <= self.num_free_blocks

    def append_slot(self, seq: Sequence, num_lookahead: int = 0) -> None:
        """Extend block_table to cover every known token and `num_lookahead` slots past them (draft tokens).

        Raises OutOfBlocksError if `can_append` is False.
        """
        num_missing = self._num_missing_blocks(seq, num_lookahead)
        if num_missing > self.num_free_blocks:
            raise OutOfBlocksError(f"not enough free KV blocks for sequence {seq.request_id!r}")
        seq.block_table.extend(self._take_free_block() for _ in range(num_missing))

    def trim(self, seq: Sequence) -> None:
        """Give back the blocks past those its tokens need (the slots of rejected drafts), the last first."""
        keep = self.num_blocks_for(seq.num_tokens)
        while len(seq.block_table) > keep:
            self._release(seq.block_table.pop())

    # ---- after a step ---------------------------------------------------------------------------

    def mark_computed(self, seq: Sequence, num_new_tokens: int) -> None:
        """Advance num_computed_tokens by `num_new_tokens` and cache the blocks that became full."""
        end = seq.num_computed_tokens + num_new_tokens
        if num_new_tokens < 0 or end > seq.num_tokens or end > len(seq.block_table) * self.block_size:
            raise ValueError(
                f"sequence {seq.request_id!r}: cannot mark {num_new_tokens} tokens computed after "
                f"{seq.num_computed_tokens} ({seq.num_tokens} tokens, {len(seq.block_table)} blocks)"
            )
        first_block = seq.num_computed_tokens // self.block_size
        seq.num_computed_tokens = end
        if self.enable_prefix_caching:
            for index in range(first_block, end // self.block_size):
                self._register(seq, index)

    def _register(self, seq: Sequence, index: int) -> None:
        start = index * self.block_size
        parent_block_id = seq.block_table[index - 1] if index > 0 else None
        tokens = seq.token_ids[start : start + self.block_size]
        self.prefix_cache.register(seq.block_table[index], tokens, parent_block_id, seq.adapter)

    def free(self, seq: Sequence) -> None:
        """Drop the sequence's references; its K/V are gone (num_computed_tokens = 0).

        Cached blocks whose count reaches 0 stay cached and evictable; the tail is released first, so
        it is evicted before the prefix it extends.
        """
        for block_id in reversed(seq.block_table):
            self._release(block_id)
        seq.block_table = []
        seq.num_computed_tokens = 0

    # ---- single blocks ---------------------------------------------------------------------------

    def _acquire(self, block_id: int) -> None:
        if self._ref_counts[block_id] == 0:
            self.prefix_cache.acquire(block_id)
        self._ref_counts[block_id] += 1

    def _release(self, block_id: int) -> None:
        if self._ref_counts[block_id] <= 0:
            raise RuntimeError(f"block {block_id} released more often than acquired")
        self._ref_counts[block_id] -= 1
        if self._ref_counts[block_id] > 0:
            return
        if self.prefix_cache.is_cached(block_id):
            self.prefix_cache.release(block_id)
        else:
            self._free.append(block_id)

    def _take_free_block(self) -> int:
        block_id = self._free.popleft() if self._free else self.prefix_cache.evict()
        if block_id is None:
            raise OutOfBlocksError("no free or evictable KV block")
        self._ref_counts[block_id] = 1
        return block_id

    def check_integrity(self) -> None:
        """Raise RuntimeError unless every block is in exactly one state (free, evictable, referenced)."""
        free = set(self._free)
        for block_id, ref_count in enumerate(self._ref_counts):
            states = (block_id in free, self.prefix_cache.is_evictable(block_id), ref_count > 0)
            if ref_count < 0 or sum(states) != 1 or (block_id in free and self.prefix_cache.is_cached(block_id)):
                raise RuntimeError(f"block {block_id}: ref_count {ref_count}, (free, evictable, used) {states}")
        if len(free) != len(self._free):
            raise RuntimeError("a block is on the free list twice")
