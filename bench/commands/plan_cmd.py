"""`bench plan`: a thin shell over `costmodel.plan.make_plan`, printing a rich table or JSON.

Heavy imports (the reference engine's loaders, torch) happen inside the command, so `bench --help` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from bench.commands.helptext import OUTPUT, examples

if TYPE_CHECKING:  # imported when used: `bench --help` stays quick
    from rich.table import Table

    from costmodel.plan import Plan

MODEL_HELP = (
    "A .gguf file, a Hugging Face directory with config.json (or the file), dummy:<preset> "
    "(tiny, smollm2-135m, llama-3.2-1b, llama-3.1-8b: the reference engine's) or default."
)
GPU_HELP = "A GPU from the catalog, e.g. h100-sxm, h200, a100-80gb, l40s, l4 (an unknown name lists them all)."
EXAMPLES = examples(
    "bench plan --model dummy:llama-3.1-8b --gpu h100-sxm --context 8192",
    "bench plan --model default --gpu l4 --kv-dtype fp8 --batch 1,8,32",
    "bench plan --model dummy:llama-3.1-8b --gpu l4 --tensor-parallel-size 2 --json",
)


def plan(
    model: str = typer.Option("default", metavar="GGUF|DIR|dummy:NAME", help=MODEL_HELP),
    gpu: str = typer.Option(None, metavar="NAME", help=GPU_HELP),
    gpu_memory_gb: float = typer.Option(
        None, metavar="GB", help="The GPU's memory, for one not in the catalog (or instead of the catalog's)."
    ),
    bandwidth_tb_s: float = typer.Option(
        None,
        metavar="TB/S",
        help="The GPU's memory bandwidth, for one not in the catalog (or instead of the catalog's).",
    ),
    dtype: str = typer.Option(
        None,
        metavar="DTYPE",
        help="Weights: bfloat16, float16, float32, fp8, int8 or int4 (default: what "
        "the model file holds; bfloat16 for a preset).",
    ),
    kv_dtype: str = typer.Option("bfloat16", metavar="DTYPE", help="KV cache: bfloat16, float16, float32 or fp8."),
    tensor_parallel_size: int = typer.Option(1, min=1, metavar="TP", help="GPUs one replica is split over."),
    context: int = typer.Option(
        None, metavar="TOKENS", help="Tokens of one sequence, prompt and output (default: the model's own max context)."
    ),
    memory_fraction: float = typer.Option(
        0.9, metavar="FRACTION", help="Share of each GPU's memory the engine takes, like vLLM's gpu-memory-utilization."
    ),
    batch: str = typer.Option(
        None, metavar="N,N,...", help="Batch sizes, e.g. 1,8,32 (default: 1,8,32,128 and the most sequences that fit)."
    ),
    kv_tokens_read: int = typer.Option(
        None,
        metavar="TOKENS",
        help="KV tokens each sequence reads per decode step (default: --context, the worst case).",
    ),
    json_output: bool = typer.Option(
        False, "--json", rich_help_panel=OUTPUT, help="Print every figure as JSON instead of the table."
    ),
) -> None:
    """Before measuring: what a model needs on a GPU, and how fast it can decode there.

    Weight bytes, KV bytes per token, the sequences that fit and the memory-bound decode-step floor."""
    import json

    from bench.commands.console import console, fail
    from bench.inputs.model_shape import model_shape
    from costmodel.plan import PlanInputs, assumptions, make_plan, parse_batches
    from costmodel.plan_shapes import PlanError, resolve_gpu

    try:
        inputs = PlanInputs(
            model=model_shape(model),
            gpu=resolve_gpu(gpu, gpu_memory_gb, bandwidth_tb_s),
            dtype=dtype,
            kv_dtype=kv_dtype,
            tensor_parallel_size=tensor_parallel_size,
            context_tokens=context,
            memory_fraction=memory_fraction,
            kv_tokens_read=kv_tokens_read,
        )
        result = make_plan(inputs, parse_batches(batch) if batch is not None else None)
    except PlanError as exc:
        fail(str(exc))
    if json_output:
        print(json.dumps(result.to_json(), indent=2))
        return
    console.print(memory_table(result))
    console.print(decode_table(result))
    for line in assumptions(result):
        console.print(f"  - {line}", highlight=False, soft_wrap=True, markup=False)


def memory_table(result: Plan) -> Table:
    from bench.commands.tables import DataTable  # the model's name is a file's word: no markup
    from costmodel.plan import gb

    inputs, m = result.inputs, result.memory
    tp, gpu = inputs.tensor_parallel_size, inputs.gpu
    table = DataTable(
        title=f"{inputs.model.name} on {tp} x {gpu.name} ({gpu.memory_gb:g} GB, {gpu.bandwidth_tb_s:g} "
        f"TB/s), {inputs.context:,}-token context"
    )
    for name, justify in (("figure", "left"), ("per GPU", "right"), ("total", "right"), ("how", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_row("parameters", "", f"{m.num_params / 1e9:,.2f} B", "from the shape")
    table.add_row(
        "weights",
        gb(m.weights_bytes_per_gpu),
        gb(m.weights_bytes),
        f"{m.weights_dtype}, {m.weights_bytes / m.num_params:.3g} bytes/param",
    )
    table.add_row(
        "KV per token",
        f"{m.kv_bytes_per_token_per_gpu:,} B",
        f"{m.kv_bytes_per_token:,} B",
        f"{inputs.model.num_layers} layers x {m.kv_heads_per_gpu} KV heads/GPU x "
        f"{inputs.model.head_dim} x 2 (K, V) x {inputs.kv_dtype}",
    )
    table.add_row(
        "KV per sequence", gb(inputs.context * m.kv_bytes_per_token_per_gpu), "", f"{inputs.context:,} tokens"
    )
    table.add_row(
        "engine's memory", gb(m.usable_bytes_per_gpu), "", f"{inputs.memory_fraction:g} x {gpu.memory_gb:g} GB"
    )
    table.add_row("KV cache", gb(m.kv_cache_bytes_per_gpu), "", "engine's memory less the weights")
    table.add_row("KV tokens that fit", f"{m.kv_tokens_that_fit:,}", "", "KV cache / KV per token")
    table.add_row("sequences that fit", f"{m.sequences_that_fit:,}", "", f"of {inputs.context:,} tokens each")
    return table


def decode_table(result: Plan) -> Table:
    from rich.table import Table

    from costmodel.plan import gb

    table = Table(title=f"memory-bound decode floor ({result.inputs.tokens_read:,} KV tokens read per sequence)")
    for name in (
        "batch",
        "bytes read per step per GPU",
        "step floor",
        "tokens/s per user (ceiling)",
        "tokens/s total (ceiling)",
    ):
        table.add_column(name, justify="right")
    for c in result.ceilings:
        table.add_row(
            str(c.batch_size),
            gb(c.bytes_read_per_step_per_gpu),
            f"{c.decode_step_floor_ms:,.2f} ms",
            f"{c.tokens_per_s_per_user_ceiling:,.1f}",
            f"{c.tokens_per_s_total_ceiling:,.0f}",
        )
    return table
