"""Read a GGUF file: metadata values, the Llama ModelConfig, and tensors under Hugging Face names.

Contract: `gguf_hf_tensors` yields (hf_name, float32 tensor) pairs equal to what the Hugging Face
checkpoint held: quantized tensors are dequantized with `gguf.quants.dequantize`, and the Q/K projection
rows that llama.cpp's converter permuted for its rope layout are put back in Hugging Face's order.
This module does not know the model class; `weights.py` copies the tensors into it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch

from engines.reference.core.model import ModelConfig

SUPPORTED_ARCHITECTURES = ("llama",)

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "rope_freqs.weight": "rope_freqs",
}
_LAYER_RE = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


def open_gguf(path: str | Path) -> gguf.GGUFReader:
    """The file's reader, parsed once per process while the file is unchanged: gguf-py parses every metadata
    string one by one (3.4 s for SmolLM2's 49,152-token vocabulary here), and a reader is read-only. The key
    holds the inode and its change time, which a write or a rename always moves (a copy that keeps the
    modification time does not fool it)."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _parsed_gguf(resolved, (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns))


@functools.lru_cache(maxsize=2)
def _parsed_gguf(path: Path, identity: tuple[int, ...]) -> gguf.GGUFReader:  # noqa: ARG001 (the cache's key)
    return gguf.GGUFReader(str(path), "r")


def gguf_field(reader: gguf.GGUFReader, key: str, default: Any = None) -> Any:
    """A metadata value: str, int, float, bool or a list of them; `default` when the key is absent."""
    field = reader.fields.get(key)
    if field is None:
        return default
    main = field.types[0]
    if main == gguf.GGUFValueType.ARRAY:
        if field.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
        return [v for i in field.data for v in field.parts[i].tolist()]
    if main == gguf.GGUFValueType.STRING:
        return bytes(field.parts[-1]).decode("utf-8", errors="replace")
    return field.parts[-1].tolist()[0]


def gguf_model_config(reader: gguf.GGUFReader) -> ModelConfig:
    """ModelConfig from the `<arch>.*` metadata; tied embeddings when the file has no output.weight."""
    arch = gguf_field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(f"GGUF general.architecture {arch!r} is not supported (accepted: {SUPPORTED_ARCHITECTURES})")

    def get(key: str, default: Any = None) -> Any:
        value = gguf_field(reader, f"{arch}.{key}", default)
        if value is None:
            raise ValueError(f"GGUF metadata lacks {arch}.{key}")
        return value

    num_heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    num_kv_heads = _single(get("attention.head_count_kv", num_heads), "attention.head_count_kv")
    tokens = gguf_field(reader, "tokenizer.ggml.tokens")
    vocab = gguf_field(reader, f"{arch}.vocab_size") or (len(tokens) if tokens else None)
    if vocab is None:
        vocab = next(t.shape[-1] for t in reader.tensors if t.name == "token_embd.weight")
    tensor_names = {t.name for t in reader.tensors}
    return ModelConfig(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(get("feed_forward_length")),
        num_layers=int(get("block_count")),
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=int(get("attention.key_length", hidden // num_heads)),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        max_position_embeddings=int(get("context_length", 2048)),
        tie_word_embeddings="output.weight" not in tensor_names,
    )


def _single(value: int | list[int], key: str) -> int:
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise ValueError(f"GGUF {key} varies per layer ({sorted(set(value))}); not supported")
        return int(value[0])
    return int(value)


def dequantize_tensor(tensor: gguf.ReaderTensor) -> torch.Tensor:
    """float32 torch tensor in row-major (outer dim first) shape, dequantized by gguf.quants."""
    try:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError as err:
        raise ValueError(f"GGUF tensor {tensor.name}: type {tensor.tensor_type.name} is not supported") from err
    shape = tuple(reversed([int(d) for d in tensor.shape]))
    values = np.ascontiguousarray(values, dtype=np.float32).reshape(shape)
    return torch.from_numpy(values if values.flags.writeable else values.copy())


def unpermute_rope_rows(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's convert_hf_to_gguf `permute` of Q/K rows (interleaved -> rotate_half halves)."""
    out_features = weight.shape[0]
    rows = weight.reshape(num_heads, out_features // num_heads // 2, 2, *weight.shape[1:])
    return rows.transpose(1, 2).reshape(weight.shape)


def hf_name(gguf_name: str) -> str | None:
    """Hugging Face name of a GGUF tensor, or None for tensors the model does not use."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _LAYER_RE.fullmatch(gguf_name)
    if match is None or match.group(2) not in _LAYER_NAMES:
        return None
    return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}.weight"


def gguf_hf_tensors(reader: gguf.GGUFReader, config: ModelConfig) -> Iterator[tuple[str, torch.Tensor]]:
    """(hf_name, float32 tensor) for every tensor the model uses, Q/K rows un-permuted."""
    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        if name is None:
            continue
        weight = dequantize_tensor(tensor)
        if name.endswith("q_proj.weight"):
            weight = unpermute_rope_rows(weight, config.num_heads)
        elif name.endswith("k_proj.weight"):
            weight = unpermute_rope_rows(weight, config.num_kv_heads)
        yield name, weight


def gguf_weight_types(reader: gguf.GGUFReader) -> dict[str, str]:
    """Hugging Face name -> the GGUF type it is stored in (Q4_1, Q8_0, F32, ...)."""
    return {name: tensor.tensor_type.name for tensor in reader.tensors if (name := hf_name(tensor.name))}
