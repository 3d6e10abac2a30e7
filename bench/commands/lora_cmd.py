"""`bench lora make`: random LoRA adapters in the PEFT layout, shaped for a base model, for speed tests.

    bench lora make --base default --rank 16 --targets q_proj,v_proj --count 16 --out adapters/

They change the output as a trained adapter would (B is not zero), so an engine does the same work for them;
their answers mean nothing. Serve them with `bench sweep --adapters-dir adapters/` (which passes them to the
engine bench starts), or `python -m engines.reference --lora-modules NAME=PATH ...`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from bench.commands.console import console, fail
from bench.commands.helptext import OUTPUT, BenchTyper, examples
from bench.inputs.flag_text import listed

EXAMPLES = examples("bench lora make --out adapters/",
                    "bench lora make --rank 16 --targets q_proj,v_proj --count 16 --out adapters/")

app = BenchTyper(add_completion=False, no_args_is_help=True, help="LoRA adapters for speed tests.", epilog=EXAMPLES)


@app.command(epilog=EXAMPLES)
def make(
    base: str = typer.Option("default", metavar="MODEL", help="The base model: a .gguf file, a safetensors "
                                                              "directory, dummy:<preset> or default "
                                                              "(SmolLM2-135M-Instruct)."),
    rank: int = typer.Option(16, min=1, metavar="N", help="The adapters' rank r."),
    targets: str = typer.Option("q_proj,v_proj", metavar="NAME,NAME,...",
                                help="Projections adapted, comma-separated: q_proj, k_proj, v_proj, o_proj, "
                                     "gate_proj, up_proj, down_proj."),
    count: int = typer.Option(1, min=1, metavar="N", help="How many adapters (each from its own seed)."),
    out: Path = typer.Option(..., metavar="DIR", rich_help_panel=OUTPUT,
                             help="Folder to write them in, one subfolder each (lora-0, lora-1, ...)."),
    prefix: str = typer.Option("lora", metavar="NAME", rich_help_panel=OUTPUT,
                               help="The adapters' names: PREFIX-0, PREFIX-1, ..."),
    seed: int = typer.Option(0, metavar="N", help="Seed of the first adapter; the next ones take seed+1, seed+2, ..."),
    alpha: float = typer.Option(None, metavar="NUMBER", help="lora_alpha (default 2 x rank)."),
) -> None:
    """Write random adapters for a base model, in the PEFT layout.

    COUNT adapters (adapter_config.json and adapter_model.safetensors each) for BASE."""
    from engines.reference.loading.lora import AdapterError, write_random_adapter
    from engines.reference.loading.weights import resolve_model_config

    try:
        config = resolve_model_config(base)
        names = [f"{prefix}-{i}" for i in range(count)]
        for i, name in enumerate(names):
            write_random_adapter(out / name, config, rank=rank, targets=listed(targets),
                                 seed=seed + i, alpha=alpha, base_model=base)  # fmt: skip
    except (AdapterError, ValueError, OSError) as exc:
        fail(f"bench lora make: {exc}")
    console.print(f"wrote {count} adapter{'s' * (count > 1)} of rank {rank} on {targets} for {base} in {out}: "
                  f"{', '.join(names[:4])}{', ...' if count > 4 else ''}")
