"""What the server is started with: `ServerOptions`, and the command-line flags that map to it one to one.

Light on purpose (no torch): `bench serve --help` and `python -m engines.reference --help` parse these
flags without loading the engine, and `bench serve` takes exactly these flags, so the two never drift.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from engines.reference.core.config import BATCHING_MODES, WEIGHT_FORMATS, EngineConfig
from engines.reference.core.speculative import SpeculativeConfig

DESCRIPTION = "The reference engine: an OpenAI-compatible server (Llama-family models, paged KV cache)."
DTYPE_NAMES = ("float32", "bfloat16", "float16")
API_KEY_ENV = "REFERENCE_API_KEY"  # read when set and no key flag is given, as vLLM reads VLLM_API_KEY


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
    max_step_ms: float = EngineConfig.max_step_ms or 0.0  # 0: no time target, the token budget alone
    max_step_ratio: float = EngineConfig.max_step_ratio or 0.0  # 0: the target alone
    min_prefill_share: float = EngineConfig.min_prefill_share
    min_prefill_chunk_tokens: int = EngineConfig.min_prefill_chunk_tokens
    wave_share: float | None = EngineConfig.wave_share  # None: never
    max_model_len: int | None = None
    kv_cache_tokens: int | None = None
    prefix_cache: bool = True
    device: str = "auto"
    dtype: str = "auto"
    weights_dtype: str = "auto"
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None  # on a command line it shows in `ps`: prefer api_key_env
    api_key_env: str | None = None  # the NAME of the environment variable holding the key
    lora_modules: tuple[str, ...] = ()  # NAME=PATH of each LoRA adapter served (PEFT layout)
    max_loras: int = EngineConfig.max_loras
    max_lora_rank: int = 16
    speculative_config: str | None = None  # vLLM's --speculative-config JSON (the ngram method)
    # what one client may ask or hold (each refusal names its flag)
    max_stop_strings: int = 16
    max_stop_chars: int = 1024
    max_stop_token_ids: int = 256
    max_connections: int = 2048  # above max_num_seqs + max_num_waiting, so the queue's own 503 comes first
    max_pending_outputs: int = 256
    idle_timeout_s: float = 5.0  # uvicorn's keep-alive timeout, which vLLM serves with
    body_timeout_s: float = 60.0
    send_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("max_stop_strings", "max_stop_chars", "max_stop_token_ids", "max_connections",
                     "max_pending_outputs", "idle_timeout_s", "body_timeout_s", "send_timeout_s"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"--{name.replace('_', '-')} must be a number > 0, got {value!r}")
        self.speculative()  # a bad config is said with the other flags

    def speculative(self) -> SpeculativeConfig | None:
        """--speculative-config parsed; ValueError naming the flag and what it takes."""
        if self.speculative_config is None:
            return None
        try:
            return SpeculativeConfig.from_json(self.speculative_config)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"--speculative-config: {exc} (e.g. '{{\"method\": \"ngram\", "
                             f"\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4}}')") from exc


def api_key_of(options: ServerOptions) -> str | None:
    """The key the server asks for: --api-key, else the variable --api-key-env names (which must be set)."""
    if options.api_key:
        return options.api_key
    if options.api_key_env is None:
        return None
    key = os.environ.get(options.api_key_env)
    if not key:
        raise ValueError(f"--api-key-env names {options.api_key_env}, but that environment variable is not set")
    return key


def parse_args(argv: list[str] | None = None, prog: str = "python -m engines.reference") -> ServerOptions:
    """The server's flags, one per option; `--help` prints them and exits, a bad flag exits with code 2."""
    parser = build_parser(prog)
    values = vars(parser.parse_args(argv))
    if values["api_key"] and values["api_key_env"]:
        parser.error("give --api-key or --api-key-env, not both")
    if not values["api_key"] and not values["api_key_env"] and os.environ.get(API_KEY_ENV):
        values["api_key_env"] = API_KEY_ENV
    try:
        options = ServerOptions(**{**values, "lora_modules": tuple(values["lora_modules"])})
        api_key_of(options)  # a variable named but not set is a bad flag, said now
    except ValueError as exc:
        parser.error(str(exc))
    return options


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
    parser.add_argument("--max-step-ms", type=float, default=defaults.max_step_ms, metavar="MS",
                        help="time target of a step that holds decodes: its prompt chunks are cut, by the step "
                        "cost the engine measures, to keep every running stream's next token within it; 0 = the "
                        f"token budget alone (default {defaults.max_step_ms:g}, a 100 ms per-token SLO)")
    parser.add_argument("--max-step-ratio", type=float, default=defaults.max_step_ratio, metavar="TIMES",
                        help="and within this many times what the step's decodes alone take, so that a small "
                        "batch decoding far faster than --max-step-ms sees no gap many times the others; 0 = the "
                        f"target alone (default {defaults.max_step_ratio:g})")
    parser.add_argument("--min-prefill-share", type=float, default=defaults.min_prefill_share, metavar="SHARE",
                        help="where a step's decodes alone take longer than --max-step-ms, the share of its time "
                        "prompts may still take, so that new users are not starved by running ones (default "
                        f"{defaults.min_prefill_share:g}: as long as the decodes; 0 = none)")
    parser.add_argument("--min-prefill-chunk-tokens", type=int, default=defaults.min_prefill_chunk_tokens,
                        metavar="N", help="prompt tokens such a step computes whatever the time, so that a prompt "
                        f"always moves (default {defaults.min_prefill_chunk_tokens})")
    parser.add_argument("--wave-share", type=float, default=defaults.wave_share, metavar="SHARE",
                        help="where more than this share of the users wait for their prompt to be computed (a wave "
                        "came in at once), a step takes prompts up to the token budget whatever the time, so the "
                        "many waiting are not held back for the few decoding; 1 = never (default "
                        f"{defaults.wave_share:g}: most of them)")
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
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer <key>' on /v1 routes (a "
                        "key on the command line shows in the process list: prefer --api-key-env)")
    parser.add_argument("--api-key-env", default=None, metavar="NAME",
                        help=f"the environment variable holding the API key (default: {API_KEY_ENV} when it is set)")
    parser.add_argument("--lora-modules", nargs="+", default=[], metavar="NAME=PATH",
                        help="LoRA adapters to serve (PEFT directories: adapter_config.json and "
                        "adapter_model.safetensors); a request names one as its model")
    parser.add_argument("--max-loras", type=int, default=defaults.max_loras,
                        help=f"distinct adapters in one batch; others wait (default {defaults.max_loras})")
    parser.add_argument("--max-lora-rank", type=int, default=defaults.max_lora_rank,
                        help=f"the highest adapter rank taken (default {defaults.max_lora_rank})")
    parser.add_argument("--speculative-config", default=None, metavar="JSON",
                        help="speculative decoding by prompt lookup for greedy requests, as vLLM takes it: "
                        "'{\"method\": \"ngram\", \"num_speculative_tokens\": K, \"prompt_lookup_min\": A, "
                        "\"prompt_lookup_max\": B}' (default: off)")
    _add_client_limits(parser.add_argument_group("limits on one client"), defaults)
    return parser


def _add_client_limits(group: argparse._ArgumentGroup, defaults: ServerOptions) -> None:
    for flag, kind, text in (
        ("max_stop_strings", int, "most strings in a request's stop"),
        ("max_stop_chars", int, "longest stop string, in characters"),
        ("max_stop_token_ids", int, "most ids in a request's stop_token_ids"),
        ("max_connections", int, "open connections; more are answered 503 and closed"),
        ("max_pending_outputs", int, "outputs of one stream its client has not read yet; past it the request is "
                                     "aborted and its connection closed"),
        ("idle_timeout_s", float, "seconds a connection may take to send a request's headers, from its opening or "
                                  "its last response (idle keep-alive connections close then)"),
        ("body_timeout_s", float, "seconds to receive a request's body (else 408)"),
        ("send_timeout_s", float, "seconds one write of a response may wait for the client to read (else the "
                                  "connection is closed and the request aborted)"),
    ):
        default = getattr(defaults, flag)
        group.add_argument("--" + flag.replace("_", "-"), type=kind, default=default, metavar="S" if kind is float
                           else "N", help=f"{text} (default {default})")
