"""Is a decode step memory-bound? The reference engine's step time against the time to read its weights.

Decoding one token reads every weight once, so at batch 1 a step can be no faster than weight bytes /
memory bandwidth. This measures the machine's read bandwidth (summing a tensor far larger than the
caches, with all the threads torch uses), the model's weight bytes in each dtype, and the engine's decode
step (the `LLMEngine` itself, no server around it) at batch 1 and 32 with 128 tokens of context. The
settings take turns, round after round (this machine's speed drifts by tens of percent within minutes); it
prints the median of the rounds and the ratio step time / weight-read time. Beside each step it times the
weight products alone (every projection and the LM head, called as the step calls them, on the same number
of rows): the part of the step the matmul kernels take, so what is left is the ops between them. Usage:

    python benchmarks/decode_step.py [--model default] [--dtypes float32,bfloat16] [--batches 1,32]
        [--weights bf16,int8,int4,auto,bf16:plain] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from engines.reference.core.dense import PackedWeight
from engines.reference.core.engine import LLMEngine
from engines.reference.core.model import PROJECTIONS, LlamaModel, linear
from engines.reference.core.quant import QuantizedWeight
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


def weight_bytes(model: LlamaModel, batch: int = 1) -> int:
    """Bytes a decode step of `batch` sequences reads: each projection and the LM head once (the quantized
    bytes where the quantized kernel runs, else the dense copy) and the norms; the embedding table only
    where it is the head (a lookup reads one row)."""
    def read(weight: torch.Tensor | PackedWeight | QuantizedWeight) -> int:
        if isinstance(weight, QuantizedWeight):
            return weight.quantized_bytes() if batch <= weight.max_rows else read(weight.dense)
        if isinstance(weight, PackedWeight):
            weight = weight.packed
        return weight.numel() * weight.element_size()

    layers = sum(read(getattr(layer, name)) for layer in model.layers for name in PROJECTIONS)
    norms = sum(read(weight) for name, weight in model.named_parameters() if name.endswith("norm"))
    return layers + norms + read(model.head_weight)


def decode_step_ms(engine: LLMEngine, batch: int, steps: int = 24, context: int = CONTEXT_TOKENS) -> float:
    """Median time of one engine step while `batch` requests decode at about `context` tokens of context."""
    params = SamplingParams(max_tokens=steps + 8, ignore_eos=True, temperature=0.0)
    prompt = [(7 * i) % 1000 + 10 for i in range(context)]
    request_ids = [f"r{batch}-{context}-{i}" for i in range(batch)]
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


def products_ms(model: LlamaModel, batch: int, repeats: int = 9) -> float:
    """Median time of the step's weight products alone at `batch` rows: each layer's projections, in order,
    then the LM head, every one on its own input of the right width (nothing else of the forward runs)."""
    weights = [getattr(layer, name) for layer in model.layers for name in PROJECTIONS] + [model.head_weight]
    inputs = [torch.randn(batch, weight.shape[1], dtype=model.dtype) for weight in weights]
    times = []
    with torch.inference_mode():
        for _ in range(repeats + 1):  # the first pass only warms up
            start = time.perf_counter()
            for x, weight in zip(inputs, weights, strict=True):
                linear(x, weight)
            times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) * 1000


def unpacked(model: LlamaModel) -> LlamaModel:
    """The model with its dense weights back in the plain layout (F.linear's), to set against the packed."""
    def plain(weight: torch.Tensor | PackedWeight) -> torch.nn.Parameter:
        values = weight.values() if isinstance(weight, PackedWeight) else weight
        return values if isinstance(values, torch.nn.Parameter) else torch.nn.Parameter(values, requires_grad=False)

    for layer in model.layers:
        for name in PROJECTIONS:
            weight = getattr(layer, name)
            if isinstance(weight, QuantizedWeight):
                weight.dense = plain(weight.dense)
            elif isinstance(weight, PackedWeight):
                delattr(layer, name)
                setattr(layer, name, plain(weight))
    if isinstance(model.head, QuantizedWeight):
        model.head.dense = plain(model.head.dense)
    elif isinstance(model.head, PackedWeight):
        if not model.config.tie_word_embeddings:
            model.lm_head = plain(model.head)
        model.head = None
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--weights", default="bf16", help="how the weights are kept, comma-separated: bf16, int8, "
                        "int4, auto (--weights-dtype); with ':plain', dense weights in F.linear's layout, not packed")
    parser.add_argument("--rounds", type=int, default=3, help="each setting measured this many times, the settings "
                        "taking turns (this machine's speed drifts); the median is printed")
    args = parser.parse_args()
    settings = []
    most = max(int(b) for b in args.batches.split(","))
    for dtype_name in args.dtypes.split(","):
        for kept in args.weights.split(","):
            weights, _, layout = kept.partition(":")
            loaded = resolve_model(args.model, dtype=getattr(torch, dtype_name), weights=weights)
            model = unpacked(loaded.model) if layout == "plain" else loaded.model
            label = f"{dtype_name}, weights {loaded.weights}{' (plain layout)' if layout == 'plain' else ''}"
            # a KV cache just large enough: every setting's engine lives through all rounds
            engine = LLMEngine.from_model(loaded, kv_cache_tokens=most * (CONTEXT_TOKENS + 64), max_num_seqs=most)
            settings.append((label, model, engine))
    bandwidths = []
    steps: dict[tuple[int, int], list[float]] = {}
    products: dict[tuple[int, int], list[float]] = {}
    for _ in range(args.rounds):
        bandwidths.append(read_bandwidth_gb_s())
        for batch in (int(b) for b in args.batches.split(",")):
            for i, (_, model, engine) in enumerate(settings):
                steps.setdefault((i, batch), []).append(decode_step_ms(engine, batch))
                products.setdefault((i, batch), []).append(products_ms(model, batch))
    bandwidth = statistics.median(bandwidths)
    print(f"memory read bandwidth: {bandwidth:.1f} GB/s ({torch.get_num_threads()} threads, median of {args.rounds} "
          f"rounds of 9 sums over 1 GiB)", flush=True)
    for i, (label, model, _) in enumerate(settings):
        print(f"{args.model} in {label}:")
        for batch in (int(b) for b in args.batches.split(",")):
            weights = weight_bytes(model, batch)
            read_ms = weights / (bandwidth * 1e9) * 1000
            step = statistics.median(steps[(i, batch)])
            print(f"  batch {batch:3d}: decode step {step:6.1f} ms = {step / read_ms:4.2f} x the read of the "
                  f"{weights / 1e6:.0f} MB of weights it uses ({read_ms:.1f} ms), {batch / step * 1000:7.1f} "
                  f"tokens/s (rounds: {', '.join(f'{t:.1f}' for t in steps[(i, batch)])})", flush=True)
            product = statistics.median(products[(i, batch)])
            print(f"             weight products alone {product:6.1f} ms = {product / read_ms:4.2f} x the read, "
                  f"{product / step:4.0%} of the step; the ops between them {step - product:5.1f} ms", flush=True)


if __name__ == "__main__":
    main()
