"""Read a GGUF file: metadata values, the Llama ModelConfig, and tensors under Hugging Face names.

Every error names the file. What the metadata says of the shape is checked against the tensors the file holds
before anything is allocated: a header that claims 2^32 hidden units is refused, not obeyed.

Contract: `gguf_hf_tensors` yields (hf_name, float32 tensor) pairs equal to what the Hugging Face
checkpoint held: quantized tensors are dequantized with `gguf.quants.dequantize`, and the Q/K projection
rows that llama.cpp's converter permuted for its rope layout are put back in Hugging Face's order.
This module does not know the model class; `weights.py` copies the tensors into it.
"""

from __future__ import annotations

import functools
import math
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
    try:
        return _parsed_gguf(resolved, (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns))
    except Exception as exc:  # gguf-py parses with numpy views, and raises whatever they raise on a corrupt file
        why = f"{type(exc).__name__}: {str(exc)[:200]}"
        raise ValueError(f"{path}: not a GGUF file gguf-py can parse ({why})") from None


def gguf_origin(reader: gguf.GGUFReader) -> str:
    """The file a reader parsed, for errors."""
    return str(getattr(reader.data, "filename", None) or "GGUF file")


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
    """ModelConfig from the `<arch>.*` metadata, checked against the tensors' shapes; tied embeddings when the file
    has no output.weight."""
    origin = gguf_origin(reader)
    arch = gguf_field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(f"{origin}: GGUF general.architecture {str(arch)[:60]!r} is not supported (accepted: "
                         f"{SUPPORTED_ARCHITECTURES})")
    metadata = _Metadata(reader, origin, arch)
    num_heads = metadata.count("attention.head_count")
    hidden = metadata.count("embedding_length")
    tensors = {t.name: t for t in reader.tensors}
    embeddings = tensors.get("token_embd.weight")
    if embeddings is None:
        raise ValueError(f"{origin}: no tensor token_embd.weight (the token embeddings)")
    tokens = gguf_field(reader, "tokenizer.ggml.tokens")
    vocab = metadata.count("vocab_size", len(tokens) if isinstance(tokens, list) and tokens else
                           int(embeddings.shape[-1]))
    try:
        config = ModelConfig(
            vocab_size=vocab, hidden_size=hidden, intermediate_size=metadata.count("feed_forward_length"),
            num_layers=metadata.count("block_count"), num_heads=num_heads,
            num_kv_heads=metadata.count("attention.head_count_kv", num_heads),
            head_dim=metadata.count("attention.key_length", max(hidden // num_heads, 1)),
            rope_theta=metadata.positive("rope.freq_base", 10000.0),
            rms_norm_eps=metadata.positive("attention.layer_norm_rms_epsilon", 1e-5),
            max_position_embeddings=metadata.count("context_length", 2048),
            tie_word_embeddings="output.weight" not in tensors)
    except ValueError as exc:
        raise ValueError(f"{origin}: {exc}") from None
    _check_tensors(tensors, config, origin, arch)
    return config


class _Metadata:
    """The `<arch>.*` values, each checked for its kind; errors name the file and the key."""

    MAX_COUNT = 2**31 - 1  # no dimension, layer count or context length of a model comes near

    def __init__(self, reader: gguf.GGUFReader, origin: str, arch: str) -> None:
        self.reader, self.origin, self.arch = reader, origin, arch

    def _value(self, key: str, default: Any) -> Any:
        value = gguf_field(self.reader, f"{self.arch}.{key}", default)
        if value is None:
            raise ValueError(f"{self.origin}: GGUF metadata lacks {self.arch}.{key}")
        return value

    def count(self, key: str, default: Any = None) -> int:
        value = self._value(key, default)
        if isinstance(value, list) and value and len(set(map(repr, value))) == 1:  # one value per layer, all equal
            value = value[0]
        if isinstance(value, list) and value:
            raise ValueError(f"{self.origin}: GGUF {self.arch}.{key} varies per layer; not supported")
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= self.MAX_COUNT:
            raise ValueError(f"{self.origin}: GGUF {self.arch}.{key} is {str(value)[:40]!r}; expected a whole number "
                             f"from 1 to {self.MAX_COUNT}")
        return value

    def positive(self, key: str, default: float) -> float:
        value = self._value(key, default)
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < math.inf:
            raise ValueError(f"{self.origin}: GGUF {self.arch}.{key} is {str(value)[:40]!r}; expected a number > 0")
        return float(value)


def _check_tensors(tensors: dict[str, gguf.ReaderTensor], config: ModelConfig, origin: str, arch: str) -> None:
    """Each tensor the model uses has the shape the metadata implies and all its bytes, and every layer the
    metadata counts is there: what the model allocates is bounded by what the file holds."""
    last = f"blk.{config.num_layers - 1}.attn_q.weight"
    if last not in tensors:
        raise ValueError(f"{origin}: {arch}.block_count is {config.num_layers}, but there is no tensor {last}")
    shapes = _gguf_shapes(config)
    for name, tensor in tensors.items():
        match = _LAYER_RE.fullmatch(name)
        if match is not None and int(match.group(1)) >= config.num_layers:
            raise ValueError(f"{origin}: tensor {name} is past {arch}.block_count ({config.num_layers})")
        expected = shapes.get(match.group(2) if match is not None else name.removesuffix(".weight"))
        if expected is None:  # a tensor the model does not use (rope_freqs, ...)
            continue
        shape = tuple(reversed([int(d) for d in tensor.shape]))
        if shape != expected:
            raise ValueError(f"{origin}: tensor {name} has shape {shape}; the {arch}.* metadata implies {expected}")
        if int(tensor.data.nbytes) != int(tensor.n_bytes):
            raise ValueError(f"{origin}: tensor {name} runs past the file's end")


def _gguf_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """A GGUF tensor's kind (`token_embd`, a layer's `attn_q`) -> the shape (outer dimension first) the config
    gives it."""
    hidden, inter, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
    q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    return {"token_embd": (vocab, hidden), "output": (vocab, hidden), "output_norm": (hidden,),
            "attn_norm": (hidden,), "ffn_norm": (hidden,), "attn_q": (q, hidden), "attn_k": (kv, hidden),
            "attn_v": (kv, hidden), "attn_output": (hidden, q), "ffn_gate": (inter, hidden),
            "ffn_up": (inter, hidden), "ffn_down": (hidden, inter)}


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
        try:
            weight = dequantize_tensor(tensor)
            if name.endswith("q_proj.weight"):
                weight = unpermute_rope_rows(weight, config.num_heads)
            elif name.endswith("k_proj.weight"):
                weight = unpermute_rope_rows(weight, config.num_kv_heads)
        except (ValueError, RuntimeError) as exc:  # an odd head size can't be un-permuted
            raise ValueError(f"{gguf_origin(reader)}: tensor {tensor.name}: {exc}") from None
        yield name, weight


def gguf_weight_types(reader: gguf.GGUFReader) -> dict[str, str]:
    """Hugging Face name -> the GGUF type it is stored in (Q4_1, Q8_0, F32, ...)."""
    return {name: tensor.tensor_type.name for tensor in reader.tensors if (name := hf_name(tensor.name))}
