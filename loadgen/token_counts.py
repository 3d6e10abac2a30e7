"""How many tokens each streamed chunk carried.

Servers may put several tokens in one chunk. The best source is the server's own per-chunk usage
(vLLM's `continuous_usage_stats`); next, the server's final token count spread over the chunks in
proportion to their text; last, one token per chunk. The record says which source was used.
"""

from __future__ import annotations


def assign_chunk_tokens(
    chunk_chars: list[int], usage_deltas: list[int] | None, server_total: int | None
) -> tuple[list[int], str]:
    """Return (tokens per chunk, source) for one finished stream."""
    if usage_deltas is not None and _deltas_are_consistent(usage_deltas, server_total):
        return usage_deltas, "server_usage_deltas"
    if server_total is not None and server_total != len(chunk_chars):
        return spread_proportionally(server_total, chunk_chars), "server_usage"
    if server_total is not None:
        return [1] * len(chunk_chars), "server_usage"
    return [1] * len(chunk_chars), "chunks"


def _deltas_are_consistent(deltas: list[int], server_total: int | None) -> bool:
    if not deltas or min(deltas) < 0 or sum(deltas) == 0:
        return False
    return server_total is None or sum(deltas) == server_total


def spread_proportionally(total: int, weights: list[int]) -> list[int]:
    """Split `total` into integers proportional to `weights` (largest remainder), summing to `total`. With
    at least as many tokens as chunks, every chunk gets one first: a chunk that carried text carried a token."""
    if 0 < len(weights) <= total:
        return [1 + count for count in _largest_remainder(total - len(weights), weights)]
    return _largest_remainder(total, weights)


def _largest_remainder(total: int, weights: list[int]) -> list[int]:
    weight_sum = sum(weights)
    if weight_sum == 0:
        weights, weight_sum = [1] * len(weights), len(weights)
    shares = [total * w / weight_sum for w in weights]
    counts = [int(s) for s in shares]
    by_remainder = sorted(range(len(shares)), key=lambda i: counts[i] - shares[i])
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts
