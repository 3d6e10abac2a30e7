"""Prefix cache: full KV blocks found again by a chain of block hashes.

Each full block's hash is seeded by its parent block's hash, so a block is found only after an
identical whole prefix. A hit is verified before reuse: the block's tokens must equal the query's and
its recorded parent must be the block matched just before it (each registration gets a unique id), so
a hash collision costs a miss, never a wrong K/V. A chain has a root: None for the base model, an adapter's
name for a LoRA adapter's sequences, whose K/V differ from the base's for the same tokens; a block is found
only under its own root. Cached blocks whose reference count dropped to 0 stay
registered and are evicted least recently released first.

This module never counts references and never allocates: the block manager tells it when a block's
count leaves 0 (`acquire`) and returns to 0 (`release`), and asks it for a victim (`evict`).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

BlockHashFn = Callable[[int | None, tuple[int, ...]], int]


def chain_hash(parent_hash: int | None, token_ids: tuple[int, ...]) -> int:
    """Hash of a full block seeded by its parent block's hash (None for the first block)."""
    return hash((parent_hash, token_ids))


@dataclass(frozen=True)
class CacheEntry:
    """A registered block: its chained hash, its tokens, its unique id, its parent's id and its chain's root."""

    block_hash: int
    token_ids: tuple[int, ...]
    uid: int
    parent_uid: int | None
    root: str | None = None


def root_hash(root: str | None) -> int | None:
    """The parent hash a chain's first block is seeded with: None for the base model."""
    return None if root is None else hash(("adapter", root))


class PrefixCache:
    """Map of chained block hashes to block ids, plus an LRU list of unreferenced cached blocks."""

    def __init__(self, block_size: int, hash_fn: BlockHashFn = chain_hash) -> None:
        self.block_size = block_size
        self._hash_fn = hash_fn
        self._block_by_hash: dict[int, int] = {}
        self._entries: dict[int, CacheEntry] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()  # oldest release first
        self._uids = itertools.count()
        self.num_query_tokens = 0
        self.num_hit_tokens = 0
        self.num_evicted_blocks = 0

    @property
    def num_cached_blocks(self) -> int:
        """Registered blocks, referenced or not."""
        return len(self._entries)

    @property
    def num_evictable_blocks(self) -> int:
        """Registered blocks with reference count 0."""
        return len(self._evictable)

    @property
    def hit_rate(self) -> float:
        return self.num_hit_tokens / self.num_query_tokens if self.num_query_tokens else 0.0

    def is_cached(self, block_id: int) -> bool:
        return block_id in self._entries

    def is_evictable(self, block_id: int) -> bool:
        return block_id in self._evictable

    def match(self, token_ids: Sequence[int], max_num_blocks: int, root: str | None = None) -> tuple[int, ...]:
        """Block ids caching the longest verified prefix of `token_ids` under `root`, at most `max_num_blocks`.

        Changes nothing (not even the LRU order or the counters).
        """
        hits: list[int] = []
        parent_hash = root_hash(root)
        parent_uid: int | None = None
        for start in range(0, max_num_blocks * self.block_size, self.block_size):
            tokens = tuple(token_ids[start : start + self.block_size])
            if len(tokens) < self.block_size:
                break
            block_hash = self._hash_fn(parent_hash, tokens)
            block_id = self._block_by_hash.get(block_hash)
            if block_id is None:
                break
            entry = self._entries[block_id]
            if entry.token_ids != tokens or entry.parent_uid != parent_uid or entry.root != root:
                break  # a hash collision: same hash, different tokens, prefix or root
            hits.append(block_id)
            parent_hash, parent_uid = block_hash, entry.uid
        return tuple(hits)

    def register(
        self, block_id: int, token_ids: Sequence[int], parent_block_id: int | None, root: str | None = None
    ) -> bool:
        """Record a full, computed block of a chain under `root` so later prompts can reuse it; True when it was
        registered.

        Skipped (False) when its parent is not registered or another block already holds its hash.
        Changes the hash map only; the block stays referenced by its caller.
        """
        tokens = tuple(token_ids)
        if len(tokens) != self.block_size:
            raise ValueError(f"only full blocks are cached: got {len(tokens)} tokens, block_size {self.block_size}")
        if block_id in self._entries:
            raise ValueError(f"block {block_id} is already registered")
        parent = None
        if parent_block_id is not None:
            parent = self._entries.get(parent_block_id)
            if parent is None:
                return False
        block_hash = self._hash_fn(parent.block_hash if parent else root_hash(root), tokens)
        if block_hash in self._block_by_hash:
            return False
        self._entries[block_id] = CacheEntry(block_hash, tokens, next(self._uids), parent.uid if parent else None, root)
        self._block_by_hash[block_hash] = block_id
        return True

    def acquire(self, block_id: int) -> None:
        """A cached block's reference count left 0: it is no longer evictable."""
        self._evictable.pop(block_id, None)

    def release(self, block_id: int) -> None:
        """A cached block's reference count reached 0: it becomes the most recently used evictable block."""
        if block_id not in self._entries:
            raise ValueError(f"block {block_id} is not cached")
        self._evictable[block_id] = None

    def evict(self) -> int | None:
        """Unregister the least recently released unreferenced block and return its id; None if none."""
        if not self._evictable:
            return None
        block_id, _ = self._evictable.popitem(last=False)
        entry = self._entries.pop(block_id)
        del self._block_by_hash[entry.block_hash]
        self.num_evicted_blocks += 1
        return block_id

    def record_query(self, num_query_tokens: int, num_hit_tokens: int) -> None:
        """Count one lookup, in tokens (like vllm:prefix_cache_queries / vllm:prefix_cache_hits)."""
        self.num_query_tokens += num_query_tokens
        self.num_hit_tokens += num_hit_tokens
