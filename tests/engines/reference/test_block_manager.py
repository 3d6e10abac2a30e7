"""Block manager: allocation covers every token, checks change nothing, LRU eviction of unreferenced blocks."""

from __future__ import annotations

import pytest

from engines.reference.core.block_manager import BlockManager, OutOfBlocksError
from engines.reference.core.sequence import Sequence

BLOCK_SIZE = 4


def computed(manager: BlockManager, request_id: str, token_ids: list[int]) -> Sequence:
    """A sequence allocated and fully computed, so its full blocks are cached."""
    seq = Sequence(request_id, token_ids)
    manager.allocate(seq)
    manager.mark_computed(seq, seq.num_uncomputed_tokens)
    return seq


def snapshot(manager: BlockManager) -> tuple:
    cache = manager.prefix_cache
    refs = tuple(manager.ref_count(b) for b in range(manager.num_blocks))
    evictable = tuple(b for b in range(manager.num_blocks) if cache.is_evictable(b))
    return refs, evictable, manager.num_free_blocks, cache.num_cached_blocks, cache.num_query_tokens


def test_allocation_covers_every_token_and_free_returns_every_block() -> None:
    """allocate gives ceil(tokens / block_size) distinct blocks; free drops every reference."""
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    seq = Sequence("a", list(range(10)))
    manager.allocate(seq)
    assert len(seq.block_table) == 3 == len(set(seq.block_table))
    assert manager.num_used_blocks == 3 and manager.kv_cache_usage_perc == 3 / 8
    manager.free(seq)
    assert seq.block_table == [] and seq.num_computed_tokens == 0
    assert manager.num_free_blocks == 8 and manager.kv_cache_usage_perc == 0.0
    manager.check_integrity()


def test_append_slot_adds_a_block_only_when_a_token_crosses_a_block_boundary() -> None:
    """A sampled token gets a new block only when the previous block is full."""
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    seq = computed(manager, "a", list(range(7)))
    for token_id, num_blocks in [(7, 2), (8, 3), (9, 3), (10, 3), (11, 3), (12, 4)]:
        seq.token_ids.append(token_id)
        manager.append_slot(seq)
        assert len(seq.block_table) == num_blocks
        manager.mark_computed(seq, 1)


def test_checks_never_change_state() -> None:
    """can_allocate and can_append leave ref counts, LRU order, the cache and its counters untouched."""
    manager = BlockManager(num_blocks=6, block_size=BLOCK_SIZE)
    manager.free(computed(manager, "old", list(range(9))))
    running = computed(manager, "run", list(range(9)))
    running.token_ids.append(99)
    before = snapshot(manager)
    assert manager.can_allocate(Sequence("new", list(range(9))))
    assert manager.can_append(running)
    assert not manager.can_allocate(Sequence("big", list(range(100, 140))))
    assert snapshot(manager) == before


def test_commit_after_a_failed_check_raises_and_changes_nothing() -> None:
    """allocate / append_slot refuse when their check says no, leaving the manager as it was."""
    manager = BlockManager(num_blocks=3, block_size=BLOCK_SIZE)
    seq = computed(manager, "a", list(range(12)))
    before = snapshot(manager)
    with pytest.raises(OutOfBlocksError):
        manager.allocate(Sequence("b", [5]))
    seq.token_ids.append(12)
    assert not manager.can_append(seq)
    with pytest.raises(OutOfBlocksError):
        manager.append_slot(seq)
    assert snapshot(manager) == before and len(seq.block_table) == 3


def test_eviction_takes_the_least_recently_released_block_tail_first() -> None:
    """Free-list blocks go first; then cached blocks are evicted LRU, each request's tail before its prefix."""
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    a_prompt, b_prompt = list(range(9)), list(range(100, 109))
    a, b = computed(manager, "a", a_prompt), computed(manager, "b", b_prompt)
    a_blocks, b_blocks = a.block_table[:2], b.block_table[:2]
    manager.free(a)
    manager.free(b)  # cached, unreferenced: a's 2 full blocks, then b's; 4 blocks on the free list
    cache = manager.prefix_cache
    manager.allocate(Sequence("c", list(range(200, 220))))  # 5 blocks: the free list, then a's tail
    assert cache.match(a_prompt, 2) == (a_blocks[0],) and cache.match(b_prompt, 2) == tuple(b_blocks)
    manager.allocate(Sequence("d", list(range(300, 308))))  # 2 blocks: a's first block, then b's tail
    assert cache.match(a_prompt, 2) == () and cache.match(b_prompt, 2) == (b_blocks[0],)
    assert cache.num_evicted_blocks == 3
    manager.check_integrity()


def test_a_hit_refreshes_a_cached_block_in_the_lru_order() -> None:
    """A block reused and released again becomes the most recently used: older cached blocks go first."""
    manager = BlockManager(num_blocks=4, block_size=BLOCK_SIZE)
    a_prompt, b_prompt = [1] * 4 + [0], [2] * 4 + [0]
    manager.free(computed(manager, "a", a_prompt))
    manager.free(computed(manager, "b", b_prompt))
    manager.free(computed(manager, "a-again", a_prompt))  # hits a's block, releases it after b's
    manager.allocate(Sequence("c", list(range(100, 112))))  # 3 blocks: 2 free, then evict the LRU one
    cache = manager.prefix_cache
    assert cache.match(b_prompt, 1) == () and len(cache.match(a_prompt, 1)) == 1


def test_eviction_never_takes_a_referenced_block() -> None:
    """Blocks shared with a running sequence are not evictable: the allocation is refused instead."""
    manager = BlockManager(num_blocks=6, block_size=BLOCK_SIZE)
    prompt = list(range(13))
    manager.free(computed(manager, "a", prompt))
    holder = Sequence("holder", prompt)
    manager.allocate(holder)  # hits 3 cached blocks, takes 1 block
    assert holder.num_computed_tokens == 12
    held = list(holder.block_table)
    assert not manager.can_allocate(Sequence("big", list(range(100, 112))))  # 3 blocks > 2 free
    manager.allocate(Sequence("fits", list(range(100, 108))))
    assert holder.block_table == held and all(manager.ref_count(b) == 1 for b in held)
    assert manager.prefix_cache.match(prompt, 3) == tuple(held[:3])
    manager.check_integrity()


def test_a_request_after_eviction_recomputes_what_was_evicted() -> None:
    """Once part of a cached prefix is evicted, the same prompt hits only the surviving leading blocks and
    gets fresh blocks (not the evicted ids' old contents) for the rest."""
    manager = BlockManager(num_blocks=6, block_size=BLOCK_SIZE)
    prompt = list(range(13))
    first = computed(manager, "first", prompt)
    survivors = first.block_table[:1]
    manager.free(first)
    filler = Sequence("filler", list(range(100, 120)))  # 5 blocks: 3 from the free list, then 2 evicted
    manager.allocate(filler)
    manager.free(filler)  # filler's blocks are not computed, so not cached: back on the free list
    again = Sequence("again", prompt)
    manager.allocate(again)
    assert again.block_table[:1] == survivors and again.num_computed_tokens == 4
    assert again.num_cached_tokens == 4 and len(again.block_table) == 4
    manager.mark_computed(again, again.num_uncomputed_tokens)
    assert manager.prefix_cache.match(prompt, 3) == tuple(again.block_table[:3])
    manager.check_integrity()


def test_recompute_after_preemption_keeps_the_reported_cached_tokens() -> None:
    """num_cached_tokens and the hit counters describe the first admission; a recompute may hit more."""
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    computed(manager, "shared", list(range(9)))
    seq = Sequence("seq", list(range(9)))
    manager.allocate(seq)
    assert seq.num_cached_tokens == 8
    manager.mark_computed(seq, 1)
    for token_id in range(9, 13):
        seq.token_ids.append(token_id)
        manager.append_slot(seq)
        manager.mark_computed(seq, 1)
    manager.free(seq)  # preempted by the scheduler
    seq.num_preemptions += 1
    counters = (manager.prefix_cache.num_query_tokens, manager.prefix_cache.num_hit_tokens)
    manager.allocate(seq)
    assert seq.num_computed_tokens == 12 and seq.num_cached_tokens == 8
    assert (manager.prefix_cache.num_query_tokens, manager.prefix_cache.num_hit_tokens) == counters
