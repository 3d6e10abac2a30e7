"""Decode attention on CPU: PyTorch's fused SDPA kernel against two batched matmuls, and what it does to a step.

A decode's query is one token (a KV group's few query heads); PyTorch's fused CPU attention is made for long
queries, so from some number of keys on (sequences times padded length), the plain matmul form
(`core/attention.py`'s `_attend_by_matmul`, K/V gathered by head rows) is faster. This prints, on the machine at
hand:

1. gather and attention alone at the default model's shapes (its KV heads, query heads per KV head and head
   size, bfloat16, 16-token blocks scattered over a cache, keys masked as the engine masks them): SDPA over
   the block gather as the engine runs it, against the matmuls over the head-row gather, per number of
   sequences and keys: where the crossover `MATMUL_DECODE_MIN_KEYS` lies here;
2. the engine's decode step (`LLMEngine.step`, no server) at a few batch sizes and contexts, with the engine's
   choice against SDPA for every batch, the two taking turns within each round (this machine's speed drifts
   within minutes). Medians of the rounds, and the ratio of step times. Usage:

    python benchmarks/decode_attention.py [--batches 1,8,32] [--contexts 128,512] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from bench.inputs.hardware import cpu_model
from benchmarks.decode_step import decode_step_ms
from engines.reference.core import attention
from engines.reference.core.engine import LLMEngine
from engines.reference.loading.weights import resolve_model

NEVER = 1 << 30  # as MATMUL_DECODE_MIN_KEYS: every decode group runs SDPA
BLOCK_SIZE = 16
CACHE_BLOCKS = 4096


def median_us(call: Callable[[], object], repeats: int = 41) -> float:
    for _ in range(5):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def attention_calls(num_kv_heads: int, group: int, head_dim: int, num_seqs: int, num_keys: int) -> tuple[float, float]:
    """µs of gather and attention of one decode group (bfloat16) by the engine's own `_decode_attention`, SDPA's
    way and the matmuls'."""
    generator = torch.Generator().manual_seed(num_seqs)
    cache = torch.randn(CACHE_BLOCKS, BLOCK_SIZE, 2, num_kv_heads, head_dim, generator=generator).bfloat16()
    q = torch.randn(num_seqs, num_kv_heads * group, head_dim, generator=generator).bfloat16()
    blocks = torch.randperm(CACHE_BLOCKS, generator=generator)[: num_seqs * num_keys // BLOCK_SIZE]
    lens = torch.randint(num_keys - BLOCK_SIZE + 1, num_keys + 1, (num_seqs,), generator=generator)
    padding = torch.arange(num_keys)[None, :] >= lens[:, None]
    mask = torch.zeros(padding.shape, dtype=torch.bfloat16).masked_fill_(padding, float("-inf"))
    mask = mask.view(num_seqs, 1, 1, num_keys)
    head_rows = attention.decode_head_rows(blocks, num_seqs, BLOCK_SIZE, num_kv_heads)
    by_sdpa = attention.DecodeGroup(None, blocks, None, mask, num_seqs, num_keys)
    by_matmuls = attention.DecodeGroup(None, blocks, head_rows, mask, num_seqs, num_keys)
    sdpa, matmuls = (median_us(lambda g=g: attention._decode_attention(q, cache, g))
                     for g in (by_sdpa, by_matmuls))
    return sdpa, matmuls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--contexts", default="128,512")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    loaded = resolve_model("default", dtype=torch.bfloat16, weights="auto")
    config = loaded.model.config
    group = config.num_heads // config.num_kv_heads
    print(f"{cpu_model()}, {torch.get_num_threads()} threads; default model in bfloat16, weights {loaded.weights}; "
          f"engine's MATMUL_DECODE_MIN_KEYS = {attention.MATMUL_DECODE_MIN_KEYS}")
    print(f"gather and attention alone ({config.num_kv_heads} KV heads x {group} queries, head_dim {config.head_dim}), "
          f"µs, SDPA / matmuls (ratio), per sequences in the group:")
    for num_keys in (128, 256, 512, 1024, 2048):
        cells = []
        for num_seqs in (1, 2, 4, 8, 16, 32):
            sdpa, matmul = attention_calls(config.num_kv_heads, group, config.head_dim, num_seqs, num_keys)
            cells.append(f"{num_seqs}: {sdpa:.0f}/{matmul:.0f} ({sdpa / matmul:.2f})")
        print(f"  {num_keys:4d} keys  " + ", ".join(cells), flush=True)
    kv_tokens = max(batches) * (max(contexts) + 64)
    engine = LLMEngine.from_model(loaded, kv_cache_tokens=kv_tokens, max_num_seqs=max(batches))
    chosen = attention.MATMUL_DECODE_MIN_KEYS
    steps: dict[tuple[str, int, int], list[float]] = {}
    for round_index in range(args.rounds):
        settings = [("engine", chosen), ("sdpa", NEVER)]
        for name, threshold in settings if round_index % 2 == 0 else settings[::-1]:
            attention.MATMUL_DECODE_MIN_KEYS = threshold
            for context in contexts:
                for batch in batches:
                    steps.setdefault((name, batch, context), []).append(decode_step_ms(engine, batch, 16, context))
    attention.MATMUL_DECODE_MIN_KEYS = chosen
    print(f"decode step, ms (median of {args.rounds} rounds, the two taking turns):")
    for context in contexts:
        for batch in batches:
            engine_rounds, sdpa_rounds = steps[("engine", batch, context)], steps[("sdpa", batch, context)]
            engine_ms, sdpa_ms = statistics.median(engine_rounds), statistics.median(sdpa_rounds)
            rounds = ", ".join(f"{e:.1f}/{s:.1f}" for e, s in zip(engine_rounds, sdpa_rounds, strict=True))
            print(f"  {batch:3d} sequences, {context:4d} tokens of context: engine {engine_ms:6.1f} "
                  f"({batch / engine_ms * 1000:6.1f} tok/s), SDPA always {sdpa_ms:6.1f} ({batch / sdpa_ms * 1000:6.1f} "
                  f"tok/s): the engine {sdpa_ms / engine_ms:.2f}x as fast (rounds, engine/SDPA: {rounds})", flush=True)


if __name__ == "__main__":
    main()
