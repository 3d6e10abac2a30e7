"""Tokens per chunk: server usage deltas first, then the server's total spread by text, then chunks."""

from __future__ import annotations

from loadgen.token_counts import assign_chunk_tokens, spread_proportionally


def test_consistent_usage_deltas_are_used_as_they_are() -> None:
    assert assign_chunk_tokens([3, 3, 3], [1, 4, 4], 9) == ([1, 4, 4], "server_usage_deltas")


def test_deltas_that_disagree_with_the_final_total_fall_back_to_spreading_it() -> None:
    assert assign_chunk_tokens([2, 2, 4], [1, 1, 1], 8) == ([2, 2, 4], "server_usage")


def test_server_total_is_spread_in_proportion_to_text() -> None:
    assert assign_chunk_tokens([8, 8, 8, 8], None, 16) == ([4, 4, 4, 4], "server_usage")


def test_one_token_per_chunk_when_the_server_reports_nothing() -> None:
    assert assign_chunk_tokens([5, 1, 7], None, None) == ([1, 1, 1], "chunks")


def test_spreading_always_sums_to_the_total_and_gives_every_chunk_a_token_when_there_are_enough() -> None:
    for total in range(0, 40):
        counts = spread_proportionally(total, [1, 5, 2, 9, 3])
        assert sum(counts) == total
        if total >= 5:  # a chunk that carried text carried at least one token
            assert min(counts) >= 1, (total, counts)
