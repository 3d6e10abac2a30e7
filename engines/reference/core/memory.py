"""KV cache sizing: bytes per cached token, free memory, and how many token slots fit in a share of it.

Contract: `default_kv_cache_tokens` turns a loaded model and a memory fraction into a token budget (what
`EngineConfig.for_kv_cache_tokens` takes); nothing here allocates. It reads only the model's shape, dtype
and device, and knows nothing of blocks, scheduling or requests.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

from engines.reference.core.config import DEFAULT_KV_CACHE_TOKENS

if TYPE_CHECKING:
    from engines.reference.loading.weights import LoadedModel


def kv_cache_bytes_per_token(loaded: LoadedModel) -> int:
    """K and V bytes of one token over all layers."""
    cfg = loaded.model.config
    return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * loaded.model.dtype.itemsize


def free_memory_bytes(device: torch.device) -> int:
    """Free memory of the device (CUDA) or of the host (anything else)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def default_kv_cache_tokens(loaded: LoadedModel, memory_fraction: float, cap_tokens: int | None = None) -> int:
    """Token slots that fit in `memory_fraction` of the free memory (after the weights were loaded).

    On CPU the default budget is also capped at DEFAULT_KV_CACHE_TOKENS; on an accelerator at `cap_tokens`
    (e.g. max_num_seqs * max_model_len) when given.
    """
    if not 0 < memory_fraction <= 1:
        raise ValueError(f"kv_cache_memory_fraction must be in (0, 1], got {memory_fraction!r}")
    tokens = int(free_memory_bytes(loaded.model.device) * memory_fraction) // kv_cache_bytes_per_token(loaded)
    if loaded.model.device.type != "cuda":
        tokens = min(tokens, DEFAULT_KV_CACHE_TOKENS)
    return min(tokens, cap_tokens) if cap_tokens else tokens
