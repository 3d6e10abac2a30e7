"""LoRA adapters handed to the engines that serve them, each in its own flags.

    lora_flags("vllm", {"sql": "/adapters/sql"}, args)
    # ['--enable-lora', '--lora-modules', 'sql=/adapters/sql', '--max-loras', '1', '--max-lora-rank', '16']

- reference: `--lora-modules NAME=PATH ... --max-loras N --max-lora-rank R`;
- vLLM: `--enable-lora --lora-modules NAME=PATH ... --max-loras N --max-lora-rank R` (R rounded up to a rank
  vLLM takes);
- SGLang: `--enable-lora --lora-paths NAME=PATH ... --max-loras-per-batch N --max-lora-rank R`.

N is the number of adapters (every adapter may share a batch: the engines' defaults, 1 for vLLM and the
reference engine, would make adapters wait for one another, which is a setting, not the engine's cost), and R
the highest rank among them; either one given as an engine argument is left as given. A container sees each
adapter mounted read-only at /adapters/NAME; a name that is not plain (`..`, `/`, `:`) is refused first. Light on
purpose: no torch, the adapters' configs read as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from common.names import UnsafeNameError, check_adapter_name

LORA_KINDS = ("reference", "vllm", "sglang", "vllm-docker", "sglang-docker")
VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the --max-lora-rank values vLLM accepts
CONTAINER_ADAPTERS = "/adapters"


class LoraFlagError(ValueError):
    """Adapters given to an engine that can't take them, or a folder that is no adapter."""


def adapter_rank(path: str) -> int:
    """An adapter's rank r, from its adapter_config.json."""
    config = Path(path) / "adapter_config.json"
    try:
        rank = json.loads(config.read_text()).get("r")
    except (OSError, ValueError, AttributeError):
        raise LoraFlagError(f"--lora {path}: {config} can't be read as a PEFT adapter config") from None
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise LoraFlagError(f"--lora {path}: {config} has r={rank!r}, expected an integer >= 1")
    return rank


def lora_flags(kind: str, modules: dict[str, str], args: dict[str, str], in_container: bool = False) -> list[str]:
    """The flags that make engine `kind` serve `modules` (name -> folder; in a container, as mounted)."""
    if not modules:
        return []
    _check_names(modules)
    engine = kind.removesuffix("-docker")
    if kind not in LORA_KINDS:
        raise LoraFlagError(f"--lora / --adapters-dir: engine '{kind}' is not given LoRA adapters by bench (the "
                            f"ones that are: {', '.join(LORA_KINDS)}); for llama.cpp, convert an adapter to GGUF and "
                            "pass it as --engine-arg lora=FILE, then ask for it with --adapters")
    rank = max(adapter_rank(path) for path in modules.values())
    paths = {name: f"{CONTAINER_ADAPTERS}/{name}" if in_container else path for name, path in modules.items()}
    pairs = [f"{name}={path}" for name, path in paths.items()]
    count_flag = "max-loras-per-batch" if engine == "sglang" else "max-loras"
    flags = {"reference": ["--lora-modules", *pairs], "vllm": ["--enable-lora", "--lora-modules", *pairs],
             "sglang": ["--enable-lora", "--lora-paths", *pairs]}[engine]
    if count_flag not in args:
        flags += [f"--{count_flag}", str(len(modules))]
    if "max-lora-rank" not in args:
        taken = next((r for r in VLLM_RANKS if r >= rank), rank) if engine == "vllm" else rank
        flags += ["--max-lora-rank", str(taken)]
    return flags


def container_mounts(modules: dict[str, str]) -> dict[str, str]:
    """Each adapter's folder mounted read-only at /adapters/NAME."""
    _check_names(modules)
    return {str(Path(path).resolve()): f"{CONTAINER_ADAPTERS}/{name}:ro" for name, path in modules.items()}


def _check_names(modules: dict[str, str]) -> None:
    """A name becomes `NAME=PATH` in a flag and /adapters/NAME in a container: `..`, `/`, `:` or `=` would escape
    either, so only a plain name is taken (from flags, an engine file's `lora:`, or an --adapters-dir listing)."""
    for name in modules:
        try:
            check_adapter_name(name, "--lora / an engine file's lora:")
        except UnsafeNameError as exc:
            raise LoraFlagError(str(exc)) from None
