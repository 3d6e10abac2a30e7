"""Prefix cache: chained block hashes, verified reuse, the last prompt token always computed."""

from __future__ import annotations

from engines.reference.core.block_manager import BlockManager
from engines.reference.core.config import EngineConfig
from engines.reference.core.prefix_cache import PrefixCache
from engines.reference.core.scheduler import Scheduler
from engines.reference.core.sequence import Sequence

BLOCK_SIZE = 16
SYSTEM_PROMPT = [1000 + i for i in range(100)]


def prefill(scheduler: Scheduler, seq: Sequence) -> None:
    """Add `seq` and run steps (with fake sampled tokens) until its prompt is computed."""
    scheduler.add(seq)
    while seq.num_output_tokens == 0:
        output = scheduler.schedule()
        scheduler.postprocess(output, [7] * len(output.scheduled))


def test_shared_system_prompt_is_served_from_cache_in_full_blocks() -> None:
    """A second request with the same 100-token prefix gets the prefix's 6 full blocks (96 tokens) cached."""
    scheduler = Scheduler(EngineConfig())
    first = Sequence("first", SYSTEM_PROMPT + [1, 2, 3])
    second = Sequence("second", SYSTEM_PROMPT + [4, 5, 6, 7])
    prefill(scheduler, first)
    prefill(scheduler, second)
    assert first.num_cached_tokens == 0
    assert second.num_cached_tokens == 96
    assert second.block_table[:6] == first.block_table[:6]
    assert all(scheduler.block_manager.ref_count(b) == 2 for b in first.block_table[:6])
    assert set(second.block_table[6:]).isdisjoint(first.block_table)


def test_cached_blocks_outlive_the_request_that_computed_them() -> None:
    """After the first request finished, its full blocks are still hit (ref count back from 0 to 1)."""
    scheduler = Scheduler(EngineConfig())
    first = Sequence("first", SYSTEM_PROMPT + [1])
    prefill(scheduler, first)
    shared = first.block_table[:6]
    scheduler.finish(first)
    second = Sequence("second", SYSTEM_PROMPT + [2])
    prefill(scheduler, second)
    assert second.num_cached_tokens == 96 and second.block_table[:6] == shared


def test_same_block_after_a_different_first_block_does_not_hit() -> None:
    """Chain hashing: block 2 is reused only after an identical block 1, even if block 2's tokens match."""
    block_1, other_block_1, block_2 = [1] * BLOCK_SIZE, [2] * BLOCK_SIZE, [3] * BLOCK_SIZE
    scheduler = Scheduler(EngineConfig())
    prefill(scheduler, Sequence("a", block_1 + block_2 + [9]))
    cache = scheduler.block_manager.prefix_cache
    assert len(cache.match(block_1 + block_2, 2)) == 2 and cache.match(other_block_1 + block_2, 2) == ()
    b = Sequence("b", other_block_1 + block_2 + [9])
    prefill(scheduler, b)
    assert b.num_cached_tokens == 0


def test_forced_hash_collision_is_caught_by_the_token_comparison() -> None:
    """With every block hashing to the same value, a different prompt never hits; an identical one still does."""
    scheduler = Scheduler(EngineConfig(), hash_fn=lambda parent_hash, token_ids: 42)
    a = Sequence("a", list(range(40)))
    prefill(scheduler, a)
    b = Sequence("b", list(range(100, 140)))
    prefill(scheduler, b)
    c = Sequence("c", list(range(40)))
    prefill(scheduler, c)
    assert b.num_cached_tokens == 0 and set(b.block_table).isdisjoint(a.block_table)
    assert c.num_cached_tokens == 16 and c.block_table[0] == a.block_table[0]  # only one block holds hash 42


def test_collision_of_a_parent_never_revives_a_stale_child() -> None:
    """A child block is reused only after the very parent it was computed after, not a colliding one."""
    colliding: dict[tuple[int | None, tuple[int, ...]], int] = {(None, (1,) * 4): 5, (None, (2,) * 4): 5}
    cache = PrefixCache(4, hash_fn=lambda parent, tokens: colliding.get((parent, tokens), hash((parent, tokens))))
    x, y, z = [1] * 4, [2] * 4, [3] * 4
    assert cache.register(0, x, None) and cache.register(1, z, 0)  # prompt x + z
    cache.release(1)
    cache.release(0)
    cache.acquire(1)  # block 1 (z) referenced again, so block 0 (x) is the LRU victim
    assert cache.evict() == 0
    assert cache.register(2, y, None)  # y takes x's hash: z's hash after y equals z's hash after x
    assert cache.match(y + z, 2) == (2,)
    assert cache.match(x + z, 2) == ()


def test_the_last_prompt_token_is_always_computed() -> None:
    """A prompt made only of cached full blocks still computes its last block (the model needs its logits)."""
    scheduler = Scheduler(EngineConfig())
    prefill(scheduler, Sequence("a", list(range(33))))
    exact = Sequence("exact", list(range(32)))
    prefill(scheduler, exact)
    longer = Sequence("longer", list(range(33)))
    scheduler.add(longer)
    output = scheduler.schedule()
    assert exact.num_cached_tokens == 16
    assert longer.num_cached_tokens == 32 and output.scheduled[0].num_new_tokens == 1


def test_query_and_hit_counters_count_prompt_tokens() -> None:
    """Queries count every admitted prompt token, hits the tokens served from cache (as vLLM's counters)."""
    scheduler = Scheduler(EngineConfig())
    prefill(scheduler, Sequence("a", SYSTEM_PROMPT + [1]))
    prefill(scheduler, Sequence("b", SYSTEM_PROMPT + [2, 3]))
    cache = scheduler.block_manager.prefix_cache
    assert (cache.num_query_tokens, cache.num_hit_tokens) == (101 + 102, 96)
    assert cache.hit_rate == 96 / 203


def test_only_computed_blocks_are_reusable() -> None:
    """A block is offered to other prompts only once its K/V are computed, never at allocation."""
    manager = BlockManager(num_blocks=32, block_size=BLOCK_SIZE)
    prompt = list(range(100))
    first = Sequence("first", prompt)
    manager.allocate(first)
    assert manager.prefix_cache.match(prompt, 6) == ()
    manager.mark_computed(first, 40)  # a chunk: blocks 0 and 1 are full, block 2 half done
    assert manager.prefix_cache.match(prompt, 6) == tuple(first.block_table[:2])
    manager.mark_computed(first, 60)
    assert manager.prefix_cache.match(prompt, 6) == tuple(first.block_table[:6])


def test_disabled_prefix_caching_never_hits() -> None:
    """enable_prefix_caching=False: identical prompts compute everything and nothing is counted."""
    scheduler = Scheduler(EngineConfig(enable_prefix_caching=False))
    prefill(scheduler, Sequence("a", SYSTEM_PROMPT))
    b = Sequence("b", SYSTEM_PROMPT)
    prefill(scheduler, b)
    cache = scheduler.block_manager.prefix_cache
    assert b.num_cached_tokens == 0 and cache.num_cached_blocks == 0 and cache.num_query_tokens == 0
