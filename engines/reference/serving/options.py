"""What the server is started with: `ServerOptions`, and the command-line flags that map to it one to one.

Light on purpose (no torch): `bench serve --help` and `python -m engines.reference --help` parse these
flags without loading the engine, and `bench serve` takes exactly these flags, so the two never drift.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from engines.reference.core.config import BATCHING_MODES, WEIGHT_FORMATS, EngineConfig

DESCRIPTION = "The reference engine: an OpenAI-compatible server (Llama-family models, paged KV cache)."
DTYPE_NAMES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class ServerOptions:
    """Everything `serve` needs; the CLI flags map one to one (device/dtype "auto": CUDA in bfloat16 if
    available, else CPU, in bfloat16 where it has native bfloat16 math, else float32; kv_cache_tokens None:
    a fraction of free memory)."""

    model: str = "default"
    served_model_name: str | None = None
    batching: str = "continuous"
    max_num_seqs: int = EngineConfig.max_num_seqs
    max_num_batched_tokens: int = EngineConfig.max_num_batched_tokens
    max_num_waiting: int = EngineConfig.max_num_waiting
    max_model_len: int | None = None
    kv_cache_tokens: int | None = None
    prefix_cache: bool = True
    device: str = "auto"
    dtype: str = "auto"
    weights_dtype: str = "auto"
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    lora_modules: tuple[str, ...] = ()  # NAME=PATH of each LoRA adapter served (PEFT layout)
    max_loras: int = EngineConfig.max_loras
    max_lora_rank: int = 16


def parse_args(argv: list[str] | None = None, prog: str = "python -m engines.reference") -> ServerOptions:
    """The server's flags, one per option; `--help` prints them and exits, a bad flag exits with code 2."""
    values = vars(build_parser(prog).parse_args(argv))
    return ServerOptions(**{**values, "lora_modules": tuple(values["lora_modules"])})


def build_parser(prog: str) -> argparse.ArgumentParser:
    """The server's flags as argparse takes them (a caller may add its own beside them)."""
    defaults = ServerOptions()
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("--model", default=defaults.model, help="a .gguf file, a safetensors directory, "
                        "dummy:<preset> (tiny, smollm2-135m, llama-3.2-1b, llama-3.1-8b: random weights of that "
                        "shape) or default (SmolLM2-135M-Instruct)")
    parser.add_argument("--served-model-name", default=None, help="the model name clients send (default: the file's)")
    parser.add_argument("--batching", choices=BATCHING_MODES, default=defaults.batching,
                        help="none (one request at a time), static (a batch runs to its end) or continuous")
    for flag, text in (("max_num_seqs", "most sequences decoded together"),
                       ("max_num_batched_tokens", "token budget of one step (longer prompts are chunked)"),
                       ("max_num_waiting", "most requests waiting; beyond it the server answers 503")):
        parser.add_argument("--" + flag.replace("_", "-"), type=int, default=getattr(defaults, flag),
                            help=f"{text} (default {getattr(defaults, flag)})")
    parser.add_argument("--max-model-len", type=int, default=None, help="default: the model's, capped by the cache")
    parser.add_argument("--kv-cache-tokens", type=int, default=None, help="default: a fraction of free memory")
    parser.add_argument("--prefix-cache", action=argparse.BooleanOptionalAction, default=defaults.prefix_cache,
                        help="reuse cached KV blocks of shared prefixes")
    parser.add_argument("--device", default=defaults.device, help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--dtype", choices=["auto", *DTYPE_NAMES], default=defaults.dtype)
    parser.add_argument("--weights-dtype", choices=WEIGHT_FORMATS, default=defaults.weights_dtype,
                        help="how the layers' weights are kept: auto (a GGUF's quantized weights as int8, read by "
                        "a weight-only kernel; floats dense), bf16 (dense, in --dtype), int8 or int4 (CPU only)")
    parser.add_argument("--host", default=defaults.host, help="address to bind (127.0.0.1 keeps it on this machine)")
    parser.add_argument("--port", type=int, default=defaults.port, help="0 = any free port")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer <key>' on /v1 routes")
    parser.add_argument("--lora-modules", nargs="+", default=[], metavar="NAME=PATH",
                        help="LoRA adapters to serve (PEFT directories: adapter_config.json and "
                        "adapter_model.safetensors); a request names one as its model")
    parser.add_argument("--max-loras", type=int, default=defaults.max_loras,
                        help=f"distinct adapters in one batch; others wait (default {defaults.max_loras})")
    parser.add_argument("--max-lora-rank", type=int, default=defaults.max_lora_rank,
                        help=f"the highest adapter rank taken (default {defaults.max_lora_rank})")
    return parser
