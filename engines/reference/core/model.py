"""Llama-family decoder (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU) for the engine.

Contract: `LlamaModel.forward(input_ids (T,), meta, kv_cache) -> logits (num_seqs, vocab)`, float32, of
each sequence's LAST new token only (the LM head is a large share of a small model's work). The flat
batch mixes prefill chunks and single decode tokens of several sequences; `attention.py` does the
paged-cache reads and writes. The model knows nothing of scheduling, block allocation, sampling or
tokenization, and holds no state between calls besides its weights.

Weights are created uninitialised; `loading/weights.py` fills them. Q/K/V and gate/up projections are fused
(one matmul each); `qkv_proj` rows are [q | k | v], `gate_up_proj` rows are [gate | up], in Hugging Face
Llama's head order (rotate_half rotary convention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engines.reference.core.attention import AttentionMetadata, AttentionPlan, KVCache, paged_attention
from engines.reference.core.dense import PackedWeight, dense_linear, pack
from engines.reference.core.lora import LoraBatch
from engines.reference.core.quant import HEAD_MAX_ROWS, QuantizedWeight, quantize

__all__ = ["AttentionMetadata", "KVCache", "LlamaModel", "ModelConfig", "RopeScaling"]


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3 style rotary frequency scaling (Hugging Face `rope_type: llama3`)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self) -> None:
        if self.factor <= 0 or self.original_max_position_embeddings < 1:
            raise ValueError("rope_scaling.factor must be > 0 and original_max_position_embeddings >= 1")
        if not 0 < self.low_freq_factor < self.high_freq_factor:
            raise ValueError("rope_scaling needs 0 < low_freq_factor < high_freq_factor")


@dataclass(frozen=True)
class ModelConfig:
    """Shape and constants of a Llama-family decoder."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    rope_scaling: RopeScaling | None = None

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelConfig.{name} must be an integer >= 1, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig.num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"ModelConfig.head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.rope_theta <= 0 or self.rms_norm_eps <= 0:
            raise ValueError("ModelConfig.rope_theta and rms_norm_eps must be > 0")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


def rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    """Inverse frequencies (head_dim / 2,) float32, as Hugging Face computes them."""
    exponents = torch.arange(0, config.head_dim, 2, dtype=torch.int64).float() / config.head_dim
    inv_freq = 1.0 / (config.rope_theta**exponents)
    scaling = config.rope_scaling
    if scaling is None:
        return inv_freq
    low_wavelen = scaling.original_max_position_embeddings / scaling.low_freq_factor
    high_wavelen = scaling.original_max_position_embeddings / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (scaling.original_max_position_embeddings / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Normalise in float32, cast back, then scale (Hugging Face LlamaRMSNorm's order).

    bfloat16 goes through F.layer_norm over [x, -x]: its mean is 0, so its variance is mean(x^2) and its first half
    is x / sqrt(mean(x^2) + eps), computed in float32 and rounded once, as RMSNorm's is. On CPU that is one fused
    kernel where F.rms_norm is about eight ops: a decode step was 5-6 % shorter for it at one user, 2-3 % at 8
    and 32. The scaling stays outside it, in the model's dtype (the norms' own). A float32 model keeps
    F.rms_norm: there the two sum in different orders, and their bits differ."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    hidden = x.shape[-1]
    normed = F.layer_norm(torch.cat([x, x.neg()], dim=-1), (2 * hidden,), eps=eps)[..., :hidden]
    return torch.mul(normed, weight)  # a new, contiguous tensor: the int4 kernel takes no strided rows


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """x (T, heads, hd) -> x * cos + rotate_half(x) * sin, with sin_signed = [-sin, sin] and
    rotate_half(x) * sin == roll(x, hd / 2) * sin_signed; into `out` if given (x itself may be it: both terms
    are computed before it is written)."""
    return torch.addcmul(x * cos, torch.roll(x, x.shape[-1] // 2, dims=-1), sin_signed, out=out)


def linear(x: torch.Tensor, weight: torch.Tensor | PackedWeight | QuantizedWeight) -> torch.Tensor:
    """x (T, in) @ weight (out, in).T -> (T, out), contiguous: a quantized weight runs its own kernel
    (`core/quant.py`), a dense one the fastest dense product for its dtype and device (`core/dense.py`)."""
    if isinstance(weight, QuantizedWeight):
        return weight.linear(x)
    return dense_linear(x, weight)


def _empty(*shape: int, dtype: torch.dtype, device: torch.device | str) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)


PROJECTIONS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


class DecoderLayer(nn.Module):
    """Pre-norm attention block and pre-norm SwiGLU block, each with a residual connection."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype, device: torch.device | str, index: int = 0) -> None:
        super().__init__()
        hidden, inter = config.hidden_size, config.intermediate_size
        self.config = config
        self.index = index  # the layer's place in the model: an adapter's deltas are found by it
        self.input_norm = _empty(hidden, dtype=dtype, device=device)
        self.qkv_proj = _empty(config.q_size + 2 * config.kv_size, hidden, dtype=dtype, device=device)
        self.o_proj = _empty(hidden, config.q_size, dtype=dtype, device=device)
        self.post_norm = _empty(hidden, dtype=dtype, device=device)
        self.gate_up_proj = _empty(2 * inter, hidden, dtype=dtype, device=device)
        self.down_proj = _empty(hidden, inter, dtype=dtype, device=device)

    def forward(
        self,
        h: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        plan: AttentionPlan,
        kv_cache: torch.Tensor,
        lora: LoraBatch | None = None,
    ) -> torch.Tensor:
        cfg = self.config
        num_tokens = h.shape[0]

        def project(x: torch.Tensor, name: str) -> torch.Tensor:
            out = linear(x, getattr(self, name))
            return out if lora is None else lora.add_deltas(out, x, self.index, name)

        qkv = project(rms_norm(h, self.input_norm, cfg.rms_norm_eps), "qkv_proj")  # (T, q + 2 kv), contiguous
        heads = qkv.view(num_tokens, cfg.num_heads + 2 * cfg.num_kv_heads, cfg.head_dim)  # q's, k's, v's
        qk = heads[:, : cfg.num_heads + cfg.num_kv_heads]
        apply_rope(qk, *rope, out=qk)  # in place: each token's K stays beside its V, the cache's layout
        q = heads[:, : cfg.num_heads]  # (T, nh, hd)
        kv = heads[:, cfg.num_heads :].view(num_tokens, 2, cfg.num_kv_heads, cfg.head_dim)  # (T, 2, n_kv, hd)
        attn = paged_attention(q, kv, kv_cache, plan)  # (T, nh, hd)
        h = h + project(attn.reshape(num_tokens, cfg.q_size), "o_proj")
        gate, up = project(rms_norm(h, self.post_norm, cfg.rms_norm_eps), "gate_up_proj").chunk(2, dim=-1)
        return h + project(F.silu(gate) * up, "down_proj")


class LlamaModel(nn.Module):
    """Embedding, decoder layers, final norm and LM head (tied to the embedding or not)."""

    inv_freq: torch.Tensor  # (head_dim / 2,) float32 rotary inverse frequencies

    def __init__(
        self, config: ModelConfig, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
    ) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = _empty(config.vocab_size, config.hidden_size, dtype=dtype, device=device)
        self.layers = nn.ModuleList(DecoderLayer(config, dtype, device, i) for i in range(config.num_layers))
        self.norm = _empty(config.hidden_size, dtype=dtype, device=device)
        self.lm_head = None
        if not config.tie_word_embeddings:
            self.lm_head = _empty(config.vocab_size, config.hidden_size, dtype=dtype, device=device)
        # the LM head as `keep_weights` keeps it (quantized, packed); None: the dense weight as loaded
        self.head: PackedWeight | QuantizedWeight | None = None
        self.register_buffer("inv_freq", rope_inv_freq(config).to(device), persistent=False)

    @torch.no_grad()
    def keep_weights(self, projections: str, head: str) -> None:
        """Keep the layers' projections in format `projections` and the LM head in `head` (`core/quant.py`; a
        quantized weight keeps a dense copy for many-row products), and each dense weight packed for the
        device's matmul where that is faster (`core/dense.py`)."""
        for layer in self.layers:
            for name in PROJECTIONS:
                kept = _kept_weight(getattr(layer, name).data, projections)
                if not isinstance(kept, torch.Tensor):  # quantized or packed: it replaces the parameter
                    delattr(layer, name)
                    setattr(layer, name, kept)
        if self.lm_head is not None:
            kept = _kept_weight(self.lm_head.data, head)
            self.head = None if isinstance(kept, torch.Tensor) else kept
        elif head != "bf16":  # tied: quantized from a copy, so the embedding lookup keeps the file's values
            kept = quantize(self.embed_tokens.data.clone(), head)
            self.head = kept if isinstance(kept, QuantizedWeight) else None
        if isinstance(self.head, QuantizedWeight):
            self.head.max_rows = HEAD_MAX_ROWS[self.head.format]
        # (a tied dense head stays the embedding itself, unpacked: packing it would hold it twice)
        if self.head is not None and self.lm_head is not None:
            del self.lm_head  # the dense head is read no more: its memory goes
            self.lm_head = None

    @property
    def head_weight(self) -> torch.Tensor | PackedWeight | QuantizedWeight:
        """The LM head as the forward reads it: as kept (quantized, packed), else the untied head or the embedding."""
        return self.head if self.head is not None else self.embed_tokens if self.lm_head is None else self.lm_head

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.dtype

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.device

    def allocate_kv_cache(self, num_blocks: int, block_size: int) -> KVCache:
        cfg = self.config
        return KVCache.allocate(
            cfg.num_layers, num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim, self.dtype, self.device
        )

    def rope_tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin (T, 1, hd) in the model dtype for the given positions (T,)."""
        freqs = positions.to(self.inv_freq.device).float()[:, None] * self.inv_freq[None, :]  # (T, hd/2)
        cos = freqs.cos().repeat(1, 2)
        sin = freqs.sin()
        sin_signed = torch.cat([-sin, sin], dim=-1)
        return cos.to(self.dtype).unsqueeze(1), sin_signed.to(self.dtype).unsqueeze(1)

    def forward(
        self, input_ids: torch.Tensor, meta: AttentionMetadata, kv_cache: KVCache, lora: LoraBatch | None = None
    ) -> torch.Tensor:
        """Logits of each sequence's last new token (of its last meta.num_logits ones), in order; `lora` adds
        adapters' deltas to their own rows."""
        device = self.device
        plan = AttentionPlan.build(meta, kv_cache.block_size, self.config.num_kv_heads, device, self.dtype)
        rope = self.rope_tables(meta.positions)
        h = F.embedding(input_ids.to(device), self.embed_tokens)  # (T, hidden)
        for layer, cache in zip(self.layers, kv_cache.caches, strict=True):
            h = layer(h, rope, plan, cache, lora)
        h = rms_norm(h.index_select(0, plan.logit_token_idx), self.norm, self.config.rms_norm_eps)  # (S, hidden)
        return linear(h, self.head_weight).float()  # (S, vocab)


def _kept_weight(weight: torch.Tensor, weight_format: str) -> torch.Tensor | PackedWeight | QuantizedWeight:
    kept = quantize(weight, weight_format)
    return pack(kept) if isinstance(kept, torch.Tensor) else kept
