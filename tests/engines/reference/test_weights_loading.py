"""Weight loading: GGUF dequantization and Q/K un-permutation, safetensors reading, dummy presets."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from engines.reference.core.model import LlamaModel, ModelConfig
from engines.reference.loading.weights import (
    DUMMY_PRESETS,
    dummy_model,
    hf_model_config,
    load_gguf,
    read_safetensors,
    resolve_model,
)

Q = gguf.GGMLQuantizationType
CONFIG = ModelConfig(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=96,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    rope_theta=5000.0,
    rms_norm_eps=float(np.float32(1e-6)),  # GGUF stores float32
    max_position_embeddings=512,
)
# (gguf tensor, type) -> where its rows land in our fused parameters
TYPES = {
    "token_embd": Q.Q8_0, "output": Q.Q4_0, "output_norm": Q.F32,
    "blk.0.attn_q": Q.F16, "blk.0.attn_k": Q.F32, "blk.0.attn_v": Q.Q4_1, "blk.0.attn_output": Q.Q4_0,
    "blk.0.ffn_gate": Q.Q4_1, "blk.0.ffn_up": Q.Q8_0, "blk.0.ffn_down": Q.F16,
    "blk.1.attn_q": Q.BF16, "blk.1.attn_k": Q.Q8_0, "blk.1.attn_v": Q.Q4_0, "blk.1.attn_output": Q.BF16,
    "blk.1.ffn_gate": Q.Q5_0, "blk.1.ffn_up": Q.Q5_1, "blk.1.ffn_down": Q.Q4_1,
}  # fmt: skip
SHAPES = {
    "token_embd": (96, 64), "output": (96, 64), "output_norm": (64,), "attn_norm": (64,), "ffn_norm": (64,),
    "attn_q": (64, 64), "attn_k": (32, 64), "attn_v": (32, 64), "attn_output": (64, 64),
    "ffn_gate": (96, 64), "ffn_up": (96, 64), "ffn_down": (64, 96),
}  # fmt: skip


def _llama_cpp_permute(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute, verbatim."""
    return (
        weight.reshape(num_heads, 2, weight.shape[0] // num_heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def _write_gguf(path: Path, hf_weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A llama GGUF of CONFIG's shape; returns each tensor as gguf.quants dequantizes it (GGUF row order)."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(CONFIG.num_layers)
    writer.add_context_length(CONFIG.max_position_embeddings)
    writer.add_embedding_length(CONFIG.hidden_size)
    writer.add_feed_forward_length(CONFIG.intermediate_size)
    writer.add_head_count(CONFIG.num_heads)
    writer.add_head_count_kv(CONFIG.num_kv_heads)
    writer.add_rope_freq_base(CONFIG.rope_theta)
    writer.add_layer_norm_rms_eps(CONFIG.rms_norm_eps)
    writer.add_vocab_size(CONFIG.vocab_size)
    stored = {}
    for name, values in hf_weights.items():
        qtype = TYPES.get(name, Q.F32)
        if name.endswith("attn_q"):
            values = _llama_cpp_permute(values, CONFIG.num_heads)
        elif name.endswith("attn_k"):
            values = _llama_cpp_permute(values, CONFIG.num_kv_heads)
        data = gguf.quants.quantize(values, qtype)
        writer.add_tensor(f"{name}.weight", data, raw_dtype=qtype if qtype not in (Q.F32, Q.F16) else None)
        stored[name] = gguf.quants.dequantize(data, qtype).reshape(values.shape)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return stored


def _hf_order(name: str, rows: np.ndarray) -> torch.Tensor:
    """Undo the permutation by index (argsort of where each row went), independent of the loader's reshape."""
    num_heads = {"attn_q": CONFIG.num_heads, "attn_k": CONFIG.num_kv_heads}.get(name.split(".")[-1])
    tensor = torch.from_numpy(np.array(rows))
    if num_heads is None:
        return tensor
    moved = _llama_cpp_permute(np.arange(rows.shape[0]), num_heads)
    return tensor[torch.from_numpy(np.argsort(moved))]


def _param_rows(model: LlamaModel, name: str) -> torch.Tensor:
    if not name.startswith("blk."):
        return {"token_embd": model.embed_tokens, "output": model.lm_head, "output_norm": model.norm}[name]
    _, index, kind = name.split(".")
    layer, c = model.layers[int(index)], CONFIG
    q, kv, inter = c.q_size, c.kv_size, c.intermediate_size
    return {
        "attn_norm": layer.input_norm, "ffn_norm": layer.post_norm, "attn_output": layer.o_proj,
        "attn_q": layer.qkv_proj[:q], "attn_k": layer.qkv_proj[q : q + kv], "attn_v": layer.qkv_proj[q + kv :],
        "ffn_gate": layer.gate_up_proj[:inter], "ffn_up": layer.gate_up_proj[inter:], "ffn_down": layer.down_proj,
    }[kind]  # fmt: skip


@pytest.fixture(scope="module")
def synthetic_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    rng = np.random.default_rng(0)
    names = ["token_embd", "output", "output_norm"] + [
        f"blk.{i}.{kind}" for i in range(2) for kind in SHAPES if kind not in ("token_embd", "output", "output_norm")
    ]
    hf_weights = {n: rng.standard_normal(SHAPES[n.split(".")[-1]]).astype(np.float32) for n in names}
    path = tmp_path_factory.mktemp("gguf") / "synthetic.gguf"
    return path, hf_weights, _write_gguf(path, hf_weights)


def test_gguf_metadata_gives_the_model_config(synthetic_gguf: tuple[Path, dict, dict]) -> None:
    """llama.* keys map to ModelConfig; an output.weight tensor means untied embeddings."""
    assert load_gguf(synthetic_gguf[0]).config == CONFIG


@pytest.mark.parametrize("name", sorted(TYPES))
def test_each_gguf_type_loads_as_gguf_quants_dequantizes_it(synthetic_gguf: tuple[Path, dict, dict], name: str) -> None:
    """Every parameter equals gguf.quants' dequantization of its tensor (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
    Q5_0, Q5_1), with Q/K rows back in Hugging Face order."""
    path, _, stored = synthetic_gguf
    model = load_gguf(path)
    torch.testing.assert_close(_param_rows(model, name), _hf_order(name, stored[name]), atol=0, rtol=0)


def test_unquantized_qk_weights_round_trip_bit_exact(synthetic_gguf: tuple[Path, dict, dict]) -> None:
    """HF -> llama.cpp permute -> GGUF F32 -> our loader gives back the original HF rows exactly."""
    path, hf_weights, _ = synthetic_gguf
    loaded = _param_rows(load_gguf(path, dtype=torch.float32), "blk.0.attn_k")
    assert torch.equal(loaded, torch.from_numpy(hf_weights["blk.0.attn_k"]))


def test_safetensors_reader_returns_each_tensor_with_its_dtype(tmp_path: Path) -> None:
    """Our dependency-free reader agrees with the safetensors library on F32, F16 and BF16 tensors."""
    save_file = pytest.importorskip("safetensors.torch").save_file
    tensors = {
        "a": torch.randn(3, 5),
        "b": torch.randn(7).half(),
        "c": torch.randn(2, 2, 4).bfloat16(),
    }
    save_file(tensors, tmp_path / "x.safetensors")
    read = dict(read_safetensors(tmp_path / "x.safetensors"))
    assert read.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert read[name].dtype == tensor.dtype and torch.equal(read[name], tensor)


@pytest.mark.parametrize(
    ("preset", "num_params"),
    [
        ("tiny", 139_584),
        ("smollm2-135m", 134_515_008),
        ("llama-3.2-1b", 1_235_814_400),
        ("llama-3.1-8b", 8_030_261_248),
    ],
)
def test_dummy_presets_have_the_published_parameter_counts(preset: str, num_params: int) -> None:
    """Each preset's shapes give the model's published size (built on the meta device: no memory)."""
    config = DUMMY_PRESETS[preset]
    model = LlamaModel(config, device="meta")
    assert sum(p.numel() for p in model.parameters()) == num_params
    layer = model.layers[0]
    assert layer.qkv_proj.shape == (config.q_size + 2 * config.kv_size, config.hidden_size)
    assert layer.gate_up_proj.shape == (2 * config.intermediate_size, config.hidden_size)
    assert layer.down_proj.shape == (config.hidden_size, config.intermediate_size)
    assert (model.lm_head is None) == config.tie_word_embeddings


def test_dummy_weights_are_reproducible_for_a_seed() -> None:
    """The same seed gives the same weights; another seed gives others."""
    first, again, other = (dummy_model("tiny", seed=s).layers[1].qkv_proj for s in (5, 5, 6))
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_bad_model_arguments_name_what_is_accepted(tmp_path: Path) -> None:
    """Unknown presets, missing paths and non-Llama configs raise ValueError saying what would work."""
    with pytest.raises(ValueError, match="tiny"):
        resolve_model("dummy:huge")
    with pytest.raises(ValueError, match="dummy:<"):
        resolve_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ValueError, match="model_type"):
        hf_model_config({"model_type": "gpt2"})
    loaded = resolve_model("dummy:tiny")
    assert loaded.tokenizer is None and loaded.name == "dummy:tiny" and loaded.model.config == DUMMY_PRESETS["tiny"]
