"""Is a decode step memory-bound? The reference engine's step time against the time to read its weights.

Decoding one token reads every weight once, so at batch 1 a step can be no faster than weight bytes /
memory bandwidth. This measures the machine's read bandwidth (summing a tensor far larger than the
caches, with all the threads torch uses), the model's weight bytes in each dtype, and the engine's decode
step (the `LLMEngine` itself, no server around it) at batch 1 and 32 with 128 tokens of context. Prints
medians of repeats and the ratio step time / weight-read time. Usage:

    python benchmarks/decode_step.py [--model default] [--dtypes float32,bfloat16] [--batches 1,32]
        [--weights bf16,int8,int4]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from engines.reference.core.engine import LLMEngine
from engines.reference.core.quant import QUANTIZED_MAX_ROWS, QuantizedWeight
from engines.reference.core.sampling import SamplingParams
from engines.reference.loading.weights import resolve_model

CONTEXT_TOKENS = 128


def read_bandwidth_gb_s(size_mib: int = 1024, repeats: int = 9) -> float:
    """Bytes read per second by `tensor.sum()` over a float32 tensor of `size_mib` (median of repeats)."""
    data = torch.rand(size_mib * 1024 * 1024 // 4, dtype=torch.float32)  # distinct pages: none shared or cached
    data.sum()  # touch every page once
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        times.append(time.perf_counter() - start)
    return data.numel() * 4 / statistics.median(times) / 1e9


def weight_bytes(model: torch.nn.Module, batch: int = 1) -> int:
    """Bytes a decode step of `batch` sequences reads: every weight once (a tied embedding is one tensor, read
    by the LM head); a quantized weight's quantized bytes where its kernel runs, else its dense copy."""
    quantized = [m for m in model.modules() if isinstance(m, QuantizedWeight)] if batch <= QUANTIZED_MAX_ROWS else []
    skipped = {m.dense.data_ptr() for m in quantized}
    dense = {p.data_ptr(): p for p in model.parameters() if p.data_ptr() not in skipped}
    return sum(p.numel() * p.element_size() for p in dense.values()) + sum(m.quantized_bytes() for m in quantized)


def decode_step_ms(engine: LLMEngine, batch: int, steps: int = 24) -> float:
    """Median time of one engine step while `batch` requests decode at about CONTEXT_TOKENS of context."""
    params = SamplingParams(max_tokens=steps + 8, ignore_eos=True, temperature=0.0)
    prompt = [(7 * i) % 1000 + 10 for i in range(CONTEXT_TOKENS)]
    request_ids = [f"r{batch}-{i}" for i in range(batch)]
    for i, request_id in enumerate(request_ids):
        engine.add_request(request_id, prompt[i % 7 :] + prompt[: i % 7], params)
    prefilled: set[str] = set()
    while len(prefilled) < batch:  # a request's first token comes with the end of its prefill
        prefilled.update(output.request_id for output in engine.step())
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - start)
    for request_id in request_ids:
        engine.abort(request_id)
    return statistics.median(times[2:]) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--weights", default="bf16", help="how the weights are kept, comma-separated: bf16, int8, "
                        "int4, auto (--weights-dtype)")
    args = parser.parse_args()
    bandwidth = read_bandwidth_gb_s()
    print(f"memory read bandwidth: {bandwidth:.1f} GB/s ({torch.get_num_threads()} threads, median of 9 sums "
          f"over 1 GiB)", flush=True)
    for dtype_name in args.dtypes.split(","):
        for kept in args.weights.split(","):
            loaded = resolve_model(args.model, dtype=getattr(torch, dtype_name), weights=kept)
            print(f"{loaded.name} in {dtype_name}, weights {loaded.weights}:", flush=True)
            engine = LLMEngine.from_model(loaded, kv_cache_tokens=64 * 1024, max_num_seqs=64)
            for batch in (int(b) for b in args.batches.split(",")):
                weights = weight_bytes(loaded.model, batch)
                read_ms = weights / (bandwidth * 1e9) * 1000
                step = decode_step_ms(engine, batch)
                print(f"  batch {batch:3d}: decode step {step:6.1f} ms = {step / read_ms:4.2f} x the read of the "
                      f"{weights / 1e6:.0f} MB of weights it uses ({read_ms:.1f} ms), {batch / step * 1000:7.1f} "
                      "tokens/s", flush=True)


if __name__ == "__main__":
    main()
