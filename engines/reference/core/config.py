"""Engine configuration: the sizes and policies of the memory and scheduling core.

A frozen dataclass validated in `__post_init__`; every error names the field and what would be
accepted. This module knows nothing about models or GPUs: the KV cache is counted in blocks of
`block_size` tokens, and `num_kv_blocks_for_tokens` turns a token budget into blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from engines.reference.core.speculative import SpeculativeConfig

BatchingMode = Literal["none", "static", "continuous"]
BATCHING_MODES: tuple[str, ...] = ("none", "static", "continuous")
WEIGHT_FORMATS = ("auto", "bf16", "int8", "int4")  # how weights are kept: see core/quant.py

DEFAULT_BLOCK_SIZE = 16
DEFAULT_KV_CACHE_TOKENS = 16_384


class ConfigError(ValueError):
    """A configuration value is out of range; the message names the field and the accepted values."""


def _require_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


def num_kv_blocks_for_tokens(kv_cache_tokens: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Blocks that fit in a budget of `kv_cache_tokens` token slots (rounded down to whole blocks)."""
    _require_int("block_size", block_size, 1)
    _require_int("kv_cache_tokens", kv_cache_tokens, block_size)
    return kv_cache_tokens // block_size


@dataclass(frozen=True)
class EngineConfig:
    """Sizes and policies of the reference engine's scheduler and KV cache.

    block_size: tokens per KV block.
    num_kv_blocks: blocks in the KV cache (see `for_kv_cache_tokens` to derive it from a token budget).
    max_num_seqs: sequences running at once.
    max_num_batched_tokens: tokens computed per step; prompts longer than what is left are chunked.
    batching: "none" (one request at a time), "static" (a batch runs until all of it finished),
        "continuous" (requests join and leave at every step).
    enable_prefix_caching: reuse KV blocks of identical prompt prefixes.
    max_num_waiting: bound of the waiting queue; beyond it the server answers 503.
    max_model_len: longest sequence (prompt + output) in tokens; the cache must hold one.
    max_loras: distinct LoRA adapters in one batch (vLLM's --max-loras); a request of another adapter waits.
    max_step_ms: time target of a step that holds decodes: its prefill chunks are sized (by the step cost the
        engine learned, `core/step_cost.py`) to keep the step within it; None: the token budget alone.
    max_step_ratio: and within this many times what the step's decodes alone take, so that where a small batch
        decodes far faster than the target, a prompt beside it does not make one gap many times the others
        (the inter-token gap's tail stays near its median); None: the target alone.
    min_prefill_share: past the target (its decodes alone take longer), the share of such a step's time its
        prompt chunks may still take, so that new users are not starved by running ones (0.5: as long as the
        decodes); 0: none beyond min_prefill_chunk_tokens.
    min_prefill_chunk_tokens: the least prompt tokens such a step computes whatever the time, so that a prompt
        always moves.
    wave_share: where more than this share of the users (running or waiting) wait for their prompt to be computed
        (a wave came in at once), a step takes prompts up to the token budget whatever the time: the few decoding
        users wait for one long step rather than the many for tens of short ones; None: never.
    speculative: prompt-lookup speculative decoding (`core/speculative.py`) for greedy requests; None: off.
    """

    block_size: int = DEFAULT_BLOCK_SIZE
    num_kv_blocks: int = DEFAULT_KV_CACHE_TOKENS // DEFAULT_BLOCK_SIZE
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    batching: BatchingMode = "continuous"
    enable_prefix_caching: bool = True
    max_num_waiting: int = 1024
    max_model_len: int = 4096
    max_loras: int = 1
    max_step_ms: float | None = 100.0
    max_step_ratio: float | None = 2.5
    min_prefill_share: float = 0.5
    min_prefill_chunk_tokens: int = 32
    wave_share: float | None = 0.5
    speculative: SpeculativeConfig | None = None

    def __post_init__(self) -> None:
        _require_int("block_size", self.block_size, 1)
        _require_int("num_kv_blocks", self.num_kv_blocks, 1)
        _require_int("max_num_seqs", self.max_num_seqs, 1)
        _require_int("max_num_batched_tokens", self.max_num_batched_tokens, 1)
        _require_int("max_num_waiting", self.max_num_waiting, 0)
        _require_int("max_model_len", self.max_model_len, 1)
        _require_int("max_loras", self.max_loras, 1)
        _require_int("min_prefill_chunk_tokens", self.min_prefill_chunk_tokens, 1)
        share = self.min_prefill_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share < 1:
            raise ConfigError(f"min_prefill_share must be a share of a step's time, 0 <= share < 1, got {share!r}")
        wave = self.wave_share
        if wave is not None and (isinstance(wave, bool) or not isinstance(wave, int | float) or not 0 <= wave < 1):
            raise ConfigError(f"wave_share must be a share of the users, 0 <= share < 1 (or None: never), got {wave!r}")
        is_number = isinstance(self.max_step_ms, int | float) and not isinstance(self.max_step_ms, bool)
        if self.max_step_ms is not None and not (is_number and self.max_step_ms > 0):
            raise ConfigError(f"max_step_ms must be a number of milliseconds > 0 (or None: no time target), "
                              f"got {self.max_step_ms!r}")
        ratio = self.max_step_ratio
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, int | float) or ratio <= 1):
            raise ConfigError(f"max_step_ratio must be a number > 1 (times the decodes' own time; or None: the "
                              f"target alone), got {ratio!r}")
        if self.speculative is not None and not isinstance(self.speculative, SpeculativeConfig):
            raise ConfigError(f"speculative must be a SpeculativeConfig (or None: no speculation), got "
                              f"{self.speculative!r}")
        if self.batching not in BATCHING_MODES:
            raise ConfigError(f"batching must be one of {', '.join(BATCHING_MODES)}, got {self.batching!r}")
        if not isinstance(self.enable_prefix_caching, bool):
            raise ConfigError(f"enable_prefix_caching must be true or false, got {self.enable_prefix_caching!r}")
        if self.max_model_len > self.kv_cache_tokens:
            raise ConfigError(
                f"max_model_len ({self.max_model_len}) must be <= the KV cache size "
                f"num_kv_blocks * block_size ({self.num_kv_blocks} * {self.block_size} = "
                f"{self.kv_cache_tokens} tokens): lower max_model_len or give the cache more tokens"
            )

    @property
    def kv_cache_tokens(self) -> int:
        """Token slots in the whole KV cache."""
        return self.num_kv_blocks * self.block_size

    @classmethod
    def for_kv_cache_tokens(cls, kv_cache_tokens: int, **fields: Any) -> EngineConfig:
        """A config whose `num_kv_blocks` is derived from a budget of `kv_cache_tokens` token slots."""
        if "num_kv_blocks" in fields:
            raise ConfigError("give either kv_cache_tokens or num_kv_blocks, not both")
        block_size = fields.get("block_size", DEFAULT_BLOCK_SIZE)
        return cls(num_kv_blocks=num_kv_blocks_for_tokens(kv_cache_tokens, block_size), **fields)
