"""EngineConfig: defaults, the KV budget helper, and errors that name the bad field."""

from __future__ import annotations

import dataclasses

import pytest

from engines.reference.core.config import ConfigError, EngineConfig, num_kv_blocks_for_tokens


def test_defaults_are_valid_and_continuous_with_prefix_caching() -> None:
    """The default config is a 16-token-block, 16k-token cache with continuous batching."""
    config = EngineConfig()
    assert (config.block_size, config.num_kv_blocks, config.kv_cache_tokens) == (16, 1024, 16_384)
    assert config.batching == "continuous" and config.enable_prefix_caching
    assert (config.max_num_seqs, config.max_num_batched_tokens) == (64, 2048)


def test_kv_cache_token_budget_rounds_down_to_whole_blocks() -> None:
    """A token budget becomes the whole blocks that fit in it."""
    assert num_kv_blocks_for_tokens(1000, 16) == 62
    config = EngineConfig.for_kv_cache_tokens(8200, block_size=32, max_model_len=8192)
    assert config.num_kv_blocks == 256 and config.kv_cache_tokens == 8192


def test_config_is_frozen() -> None:
    """A config never changes after validation; dataclasses.replace re-validates."""
    config = EngineConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.block_size = 32  # type: ignore[misc]
    with pytest.raises(ConfigError, match="max_num_seqs"):
        dataclasses.replace(config, max_num_seqs=0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("block_size", 0),
        ("num_kv_blocks", -1),
        ("max_num_seqs", 0),
        ("max_num_batched_tokens", 0),
        ("max_num_waiting", -1),
        ("max_model_len", 0),
        ("block_size", 1.5),
        ("max_num_seqs", True),
        ("enable_prefix_caching", "yes"),
    ],
)
def test_invalid_values_raise_errors_that_name_the_field(field: str, value: object) -> None:
    """Each bad value is rejected with a message naming its field and the value given."""
    with pytest.raises(ConfigError, match=field) as error:
        EngineConfig(**{field: value})  # type: ignore[arg-type]
    assert repr(value) in str(error.value)


def test_unknown_batching_mode_lists_the_accepted_modes() -> None:
    """batching accepts none, static or continuous, and says so."""
    with pytest.raises(ConfigError, match="batching must be one of none, static, continuous, got 'dynamic'"):
        EngineConfig(batching="dynamic")  # type: ignore[arg-type]


def test_max_model_len_must_fit_in_the_kv_cache() -> None:
    """A cache smaller than one max-length sequence is rejected, naming both sides."""
    with pytest.raises(ConfigError, match="max_model_len .* num_kv_blocks \\* block_size"):
        EngineConfig(num_kv_blocks=10, block_size=16, max_model_len=161)
    assert EngineConfig(num_kv_blocks=10, block_size=16, max_model_len=160).kv_cache_tokens == 160


def test_budget_helper_names_its_arguments() -> None:
    """A budget smaller than one block, or giving both a budget and num_kv_blocks, is an error."""
    with pytest.raises(ConfigError, match="kv_cache_tokens"):
        num_kv_blocks_for_tokens(8, 16)
    with pytest.raises(ConfigError, match="num_kv_blocks"):
        EngineConfig.for_kv_cache_tokens(1024, num_kv_blocks=4)
