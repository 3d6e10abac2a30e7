"""LoRA adapters in the PEFT layout: read one into a `LoraAdapter`, or write random ones for speed tests.

The layout (what `peft`'s `save_pretrained` writes): a directory with `adapter_config.json` (`r`,
`lora_alpha`, `target_modules`, and `use_rslora`, `bias`, `use_dora`, `modules_to_save`, which must be
plain) and `adapter_model.safetensors`, tensors named
`base_model.model.model.layers.{i}.{self_attn|mlp}.{target}.lora_A.weight` (r, in) and `...lora_B.weight`
(out, r). Every refusal names the adapter, the file and the field or tensor. The module knows nothing of the
engine around the adapter.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from engines.reference.core.lora import LORA_TARGETS, LoraAdapter, ProjectionDelta
from engines.reference.core.model import ModelConfig
from engines.reference.loading.weights import read_safetensors

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
DEFAULT_MAX_LORA_RANK = 16  # vLLM's --max-lora-rank default
_TENSOR_RE = re.compile(
    r"(?:base_model\.model\.)?model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.default)?\.weight"
)
_SUBMODULE = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
              "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}  # fmt: skip


class AdapterError(ValueError):
    """An adapter that can't be served; the message names it, the file and what is wrong."""


def target_rows(config: ModelConfig) -> dict[str, tuple[str, int, int, int]]:
    """Hugging Face target -> (our fused projection, first output row, end row, input features)."""
    q, kv, inter, hidden = config.q_size, config.kv_size, config.intermediate_size, config.hidden_size
    return {
        "q_proj": ("qkv_proj", 0, q, hidden),
        "k_proj": ("qkv_proj", q, q + kv, hidden),
        "v_proj": ("qkv_proj", q + kv, q + 2 * kv, hidden),
        "o_proj": ("o_proj", 0, hidden, q),
        "gate_proj": ("gate_up_proj", 0, inter, hidden),
        "up_proj": ("gate_up_proj", inter, 2 * inter, hidden),
        "down_proj": ("down_proj", 0, hidden, inter),
    }


def read_adapter_config(path: Path, max_rank: int = DEFAULT_MAX_LORA_RANK) -> dict[str, Any]:
    """adapter_config.json, checked: r within max_rank, lora_alpha a number, target_modules known ones."""
    file = path / CONFIG_FILE
    if not file.is_file():
        raise AdapterError(f"adapter {path}: no {CONFIG_FILE} (a PEFT LoRA directory holds {CONFIG_FILE} and "
                           f"{WEIGHTS_FILE})")
    try:
        raw = json.loads(file.read_text())
    except ValueError as exc:
        raise AdapterError(f"adapter {file}: not valid JSON ({exc})") from None
    except RecursionError:
        raise AdapterError(f"adapter {file}: not valid JSON (nested too deeply)") from None
    if not isinstance(raw, dict):
        raise AdapterError(f"adapter {file}: expected a JSON object")

    def bad(field: str, wanted: str) -> AdapterError:
        return AdapterError(f"adapter {file}: {field} is {raw.get(field)!r}; expected {wanted}")

    if raw.get("peft_type", "LORA") != "LORA":
        raise bad("peft_type", "LORA")
    rank = raw.get("r")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise bad("r", "an integer >= 1")
    if rank > max_rank:
        raise AdapterError(f"adapter {file}: r is {rank}, over --max-lora-rank {max_rank}; start the engine with "
                           f"--max-lora-rank {rank} or more")
    alpha = raw.get("lora_alpha", rank)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha <= sys.float_info.max:
        raise bad("lora_alpha", "a number > 0")
    targets = raw.get("target_modules")
    if targets == "all-linear":
        targets = list(LORA_TARGETS)
    if isinstance(targets, str):
        targets = [targets]
    if not isinstance(targets, list) or not targets or any(t not in LORA_TARGETS for t in targets):
        raise bad("target_modules", f"a list of {', '.join(LORA_TARGETS)} (or 'all-linear')")
    for field, plain in (("bias", "none"), ("use_dora", False), ("fan_in_fan_out", False)):
        if raw.get(field, plain) not in (plain, None):
            raise bad(field, f"{plain!r}: only plain LoRA is served")
    if raw.get("modules_to_save"):
        raise bad("modules_to_save", "none (a fully trained module can't share the base weights)")
    if raw.get("use_rslora") not in (None, False, True):
        raise bad("use_rslora", "true or false")
    ordered = sorted(set(targets), key=LORA_TARGETS.index)
    return {**raw, "r": rank, "lora_alpha": float(alpha), "target_modules": ordered}


def load_adapter(
    name: str, path: str | Path, config: ModelConfig, device: torch.device | str = "cpu",
    max_rank: int = DEFAULT_MAX_LORA_RANK,
) -> LoraAdapter:
    """A PEFT LoRA directory as the model's deltas (`core/lora.py`: float32, whatever the model's dtype) on
    `device`."""
    directory = Path(path)
    if not directory.is_dir():
        raise AdapterError(f"adapter {name}: {directory} is not a directory (a PEFT LoRA directory holds "
                           f"{CONFIG_FILE} and {WEIGHTS_FILE})")
    raw = read_adapter_config(directory, max_rank)
    rank, alpha, targets = raw["r"], raw["lora_alpha"], tuple(raw["target_modules"])
    scaling = alpha / rank**0.5 if raw.get("use_rslora") else alpha / rank
    weights_file = directory / WEIGHTS_FILE
    if not weights_file.is_file():
        raise AdapterError(f"adapter {name}: {weights_file} is missing")
    pairs: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    rows = target_rows(config)
    try:
        tensors = list(read_safetensors(weights_file))
    except (ValueError, KeyError, OSError) as exc:
        raise AdapterError(f"adapter {name}: {weights_file} can't be read as safetensors ({exc})") from None
    for tensor_name, tensor in tensors:
        match = _TENSOR_RE.fullmatch(tensor_name)
        if match is None:
            raise AdapterError(f"adapter {name}: {weights_file}: tensor {tensor_name!r} is not a LoRA A or B of a "
                               f"layer's {', '.join(LORA_TARGETS)}")
        layer, target, kind = int(match.group(1)), match.group(2), match.group(3)
        if target not in targets or layer >= config.num_layers:
            raise AdapterError(f"adapter {name}: {weights_file}: tensor {tensor_name!r} is outside target_modules "
                               f"{list(targets)} or the base model's {config.num_layers} layers")
        _, start, end, in_features = rows[target]
        shape = (rank, in_features) if kind == "A" else (end - start, rank)
        if tuple(tensor.shape) != shape:
            raise AdapterError(f"adapter {name}: {weights_file}: tensor {tensor_name!r} has shape "
                               f"{tuple(tensor.shape)}, expected {shape} for r={rank} on this base model")
        pairs.setdefault((layer, target), {})[kind] = tensor
    for (layer, target), pair in pairs.items():
        if set(pair) != {"A", "B"}:
            missing = ({"A", "B"} - set(pair)).pop()
            raise AdapterError(f"adapter {name}: {weights_file}: layer {layer} {target} has no lora_{missing} tensor")
    if not pairs:
        raise AdapterError(f"adapter {name}: {weights_file} holds no LoRA tensors")
    layers = tuple(
        _layer_deltas({t: pairs[(i, t)] for t in targets if (i, t) in pairs}, rows, scaling, device)
        for i in range(config.num_layers)
    )
    return LoraAdapter(name, rank, alpha, targets, str(directory), layers)


def _layer_deltas(
    pairs: dict[str, dict[str, torch.Tensor]], rows: dict[str, tuple[str, int, int, int]], scaling: float,
    device: torch.device | str,
) -> dict[str, ProjectionDelta]:
    """One layer's targets grouped by fused projection: A's stacked, B's placed on their rows (times scaling)."""
    deltas: dict[str, ProjectionDelta] = {}
    for projection in dict.fromkeys(rows[t][0] for t in pairs):
        members = [t for t in pairs if rows[t][0] == projection]
        out_rows = max(end for p, _, end, _ in rows.values() if p == projection)
        ranks = [pairs[t]["A"].shape[0] for t in members]
        a = torch.cat([pairs[t]["A"].float() for t in members])
        b = torch.zeros(out_rows, sum(ranks))
        column = 0
        for target, rank in zip(members, ranks, strict=True):
            _, start, end, _ = rows[target]
            b[start:end, column : column + rank] = pairs[target]["B"].float() * scaling
            column += rank
        deltas[projection] = ProjectionDelta(a.to(device), b.to(device))
    return deltas


# An adapter's name is a model id in requests, /v1/models and metric labels: printable, no spaces, bounded.
ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
ADAPTER_NAME_SHAPE = "1 to 128 letters, digits, '.', '_', ':', '/' or '-', starting with a letter or digit"


def parse_lora_modules(values: Sequence[str]) -> dict[str, str]:
    """`NAME=PATH` items (vLLM's --lora-modules syntax) -> {name: path}; a bad item is named."""
    modules: dict[str, str] = {}
    for item in values:
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise AdapterError(f"--lora-modules {item!r}: expected NAME=PATH (e.g. sql=/adapters/sql)")
        name = name.strip()
        if not ADAPTER_NAME.match(name):
            raise AdapterError(f"--lora-modules {item[:80]!r}: the name must be {ADAPTER_NAME_SHAPE}")
        if name in modules:
            raise AdapterError(f"--lora-modules: the name {name!r} is given twice")
        modules[name] = path.strip()
    return modules


def write_random_adapter(
    out: str | Path, config: ModelConfig, rank: int = 16, targets: Sequence[str] = ("q_proj", "v_proj"),
    seed: int = 0, alpha: float | None = None, std: float = 0.02, base_model: str = "",
) -> Path:
    """A PEFT LoRA directory of random A and B (B is nonzero, unlike a fresh PEFT adapter, so it changes the
    output), shaped for `config`; reproducible for a seed."""
    from safetensors.torch import save_file  # the writer only: reading uses the loader's own reader

    unknown = [t for t in targets if t not in LORA_TARGETS]
    if unknown or not targets:
        raise AdapterError(f"targets {list(targets)}: expected some of {', '.join(LORA_TARGETS)}")
    if rank < 1:
        raise AdapterError(f"rank {rank}: expected an integer >= 1")
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    rows = target_rows(config)
    tensors: dict[str, torch.Tensor] = {}
    for layer in range(config.num_layers):
        for target in targets:
            _, start, end, in_features = rows[target]
            prefix = f"base_model.model.model.layers.{layer}.{_SUBMODULE[target]}.{target}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, in_features, generator=generator) * std
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(end - start, rank, generator=generator) * std
    save_file(tensors, str(directory / WEIGHTS_FILE))
    adapter_config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank,
        "lora_alpha": alpha if alpha is not None else 2 * rank,
        "target_modules": list(targets), "lora_dropout": 0.0, "bias": "none", "use_rslora": False,
        "use_dora": False, "fan_in_fan_out": False, "modules_to_save": None, "base_model_name_or_path": base_model,
    }  # fmt: skip
    (directory / CONFIG_FILE).write_text(json.dumps(adapter_config, indent=2) + "\n")
    return directory
