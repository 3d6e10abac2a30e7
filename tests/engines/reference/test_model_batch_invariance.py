"""A sequence's logits do not depend on how it is batched or chunked, nor on who filled its cache blocks."""

from __future__ import annotations

import pytest
import torch

from engines.reference.core import attention
from engines.reference.core.model import LlamaModel, rms_norm
from engines.reference.core.model_runner import BatchItem, ModelRunner
from engines.reference.core.quant import Int4Weight
from engines.reference.loading.weights import dummy_model

BLOCK_SIZE = 4
NUM_BLOCKS = 64
ATOL = 1e-4  # float32 rounding: matmuls of different batch sizes use different kernels


@pytest.fixture(scope="module")
def model() -> LlamaModel:
    return dummy_model("tiny", seed=3, std=0.3)  # large weights: attention far from uniform


def _runner(model: LlamaModel) -> ModelRunner:
    return ModelRunner(model, model.allocate_kv_cache(NUM_BLOCKS, BLOCK_SIZE), BLOCK_SIZE)


def _tokens(seed: int, length: int) -> list[int]:
    return torch.randint(0, 512, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def _tables(num_seqs: int, blocks_each: int) -> list[list[int]]:
    order = torch.randperm(NUM_BLOCKS, generator=torch.Generator().manual_seed(7)).tolist()
    return [order[i * blocks_each : (i + 1) * blocks_each] for i in range(num_seqs)]


def _solo(model: LlamaModel, item: BatchItem) -> torch.Tensor:
    """The item's logits with a fresh cache: its cached part prefilled first, then the step alone."""
    runner = _runner(model)
    if item.num_computed_tokens:
        runner.run([BatchItem(item.token_ids, 0, item.num_computed_tokens, item.block_table)])
    return runner.run([item])[0]


def test_logits_are_the_same_alone_and_in_a_mixed_batch(model: LlamaModel) -> None:
    """Decodes, a fresh prefill, a second prefill chunk and a one-token prompt in one flat batch each
    give the logits they give alone."""
    tables = _tables(5, 8)
    items = [
        BatchItem(_tokens(1, 23), 22, 1, tables[0]),  # decode
        BatchItem(_tokens(2, 13), 0, 13, tables[1]),  # whole prompt
        BatchItem(_tokens(3, 19), 8, 11, tables[2]),  # second chunk over a cached prefix
        BatchItem(_tokens(4, 9), 8, 1, tables[3]),  # decode
        BatchItem(_tokens(5, 2), 0, 1, tables[4]),  # one-token prompt
    ]
    runner = _runner(model)
    runner.run(
        [BatchItem(i.token_ids, 0, i.num_computed_tokens, i.block_table) for i in items if i.num_computed_tokens]
    )
    batched = runner.run(items)
    for row, item in enumerate(items):
        torch.testing.assert_close(batched[row], _solo(model, item), atol=ATOL, rtol=0)


@pytest.mark.parametrize("min_keys", [1 << 30, 40], ids=["sdpa", "matmul"])
def test_pure_decode_batch_with_unequal_contexts_matches_solo(
    model: LlamaModel, min_keys: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batched decode path (padded and masked, in groups of similar length) equals each sequence alone (at
    most 32 keys: SDPA), by SDPA and by the batched matmuls (from MATMUL_DECODE_MIN_KEYS keys a group on)."""
    monkeypatch.setattr(attention, "MATMUL_DECODE_MIN_KEYS", min_keys)
    lengths = (5, 17, 30, 9, 13, 21, 24, 8)
    tables = _tables(len(lengths), 8)
    items = [BatchItem(_tokens(10 + i, n), n - 1, 1, tables[i]) for i, n in enumerate(lengths)]
    runner = _runner(model)
    plan = attention.AttentionPlan.build(runner.prepare(items)[1], BLOCK_SIZE, model.config.num_kv_heads,
                                         model.device, model.dtype)
    assert len(plan.decodes) > 1 and all((group.head_rows is not None) == (min_keys == 40) for group in plan.decodes)
    runner.run([BatchItem(i.token_ids, 0, i.num_computed_tokens, i.block_table) for i in items])
    batched = runner.run(items)
    for row, item in enumerate(items):
        torch.testing.assert_close(batched[row], _solo(model, item), atol=ATOL, rtol=0)


def test_a_bfloat16_decode_batch_through_the_int4_kernel_matches_solo() -> None:
    """The default model's kind of step: bfloat16, int4 projections, a few decode rows, which go through the int4
    kernel (it takes only contiguous rows: what the norms hand it must be)."""
    quantized = dummy_model("tiny", dtype=torch.bfloat16, seed=3, std=0.3)
    quantized.keep_weights("int4", "int8")
    assert isinstance(quantized.layers[0].qkv_proj, Int4Weight) and quantized.layers[0].qkv_proj.max_rows >= 4
    lengths = (5, 17, 30, 9)
    tables = _tables(len(lengths), 8)
    items = [BatchItem(_tokens(20 + i, n), n - 1, 1, tables[i]) for i, n in enumerate(lengths)]
    runner = _runner(quantized)
    runner.run([BatchItem(i.token_ids, 0, i.num_computed_tokens, i.block_table) for i in items])
    batched = runner.run(items)
    for row, item in enumerate(items):  # logits near 10 in bfloat16: a step of 0.0625; the padded batch rounds apart
        alone = _solo(quantized, item)
        torch.testing.assert_close(batched[row], alone, atol=2 * 0.0625, rtol=0)
        assert int(batched[row].argmax()) == int(alone.argmax())


def test_chunked_prefill_equals_one_shot_prefill(model: LlamaModel) -> None:
    """A 37-token prompt split over three steps gives the one-shot logits, and so does the next decode."""
    tokens, table = _tokens(20, 38), _tables(1, 10)[0]
    one_shot = _runner(model)
    expected = one_shot.run([BatchItem(tokens, 0, 37, table)])[0]
    expected_next = one_shot.run([BatchItem(tokens, 37, 1, table)])[0]
    chunked = _runner(model)
    for start, length in ((0, 16), (16, 13)):
        chunked.run([BatchItem(tokens, start, length, table)])
    torch.testing.assert_close(chunked.run([BatchItem(tokens, 29, 8, table)])[0], expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(chunked.run([BatchItem(tokens, 37, 1, table)])[0], expected_next, atol=ATOL, rtol=0)


def test_prefix_blocks_written_by_another_sequence_serve_as_cache(model: LlamaModel) -> None:
    """A sequence reusing another's full prefix blocks (as the prefix cache does) gets its own logits."""
    shared, own = _tables(2, 4)
    prefix = _tokens(30, 8)
    first, second = prefix + _tokens(31, 6), prefix + _tokens(32, 9)
    runner = _runner(model)
    runner.run([BatchItem(first, 0, len(first), shared)])
    reused = runner.run([BatchItem(second, 8, len(second) - 8, shared[:2] + own)])[0]
    torch.testing.assert_close(reused, _solo(model, BatchItem(second, 0, len(second), own + shared)), atol=ATOL, rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_half_precision_logits_stay_close_to_float32(dtype: torch.dtype) -> None:
    """The same weights in bf16/fp16 give logits within half-precision error of float32, same argmax."""
    tokens, table = _tokens(40, 12), _tables(1, 4)[0]
    logits = {}
    for kind in (torch.float32, dtype):
        runner = _runner(dummy_model("tiny", dtype=kind, seed=3))
        runner.run([BatchItem(tokens, 0, 11, table)])
        logits[kind] = runner.run([BatchItem(tokens, 11, 1, table)])[0]
    reference = logits[torch.float32]
    assert logits[dtype].dtype == torch.float32
    assert (logits[dtype] - reference).abs().max() < 0.05 * reference.abs().max()
    assert logits[dtype].argmax() == reference.argmax()


def test_runner_rejects_a_block_table_too_short_for_the_context(model: LlamaModel) -> None:
    """The runner never allocates: a table that cannot hold the tokens is an error, not a silent write."""
    with pytest.raises(ValueError, match="cannot hold"):
        _runner(model).run([BatchItem(_tokens(50, 9), 0, 9, [1, 2])])
    with pytest.raises(ValueError, match="num_new_tokens"):
        BatchItem([1, 2, 3], 2, 2, [0])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_cuda_logits_match_cpu(dtype: torch.dtype) -> None:
    """The same code on a GPU: a mixed prefill/decode batch gives the CPU's float32 logits."""
    tables = _tables(2, 8)
    items = [BatchItem(_tokens(60, 21), 20, 1, tables[0]), BatchItem(_tokens(61, 14), 5, 9, tables[1])]
    logits, cpu_model = {}, dummy_model("tiny", seed=3)
    cuda_model = LlamaModel(cpu_model.config, dtype=dtype, device="cuda")
    cuda_model.load_state_dict(cpu_model.state_dict())  # the same weights (generators differ by device)
    for device, model in (("cpu", cpu_model), ("cuda", cuda_model)):
        runner = ModelRunner(model, model.allocate_kv_cache(NUM_BLOCKS, BLOCK_SIZE), BLOCK_SIZE)
        runner.run([BatchItem(i.token_ids, 0, i.num_computed_tokens, i.block_table) for i in items])
        logits[device] = runner.run(items).cpu()
    tolerance = 1e-3 if dtype == torch.float32 else 0.05 * logits["cpu"].abs().max().item()
    torch.testing.assert_close(logits["cuda"], logits["cpu"], atol=tolerance, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_decode_attention_by_matmul_equals_sdpa(dtype: torch.dtype) -> None:
    """The matmul path gives SDPA's outputs on a padded, masked decode group: to float32 rounding, and within
    one bfloat16 rounding of them in bfloat16 (its softmax weights are rounded before the second product)."""
    generator = torch.Generator().manual_seed(11)
    q, keys, values = (torch.randn(shape, generator=generator).to(dtype) for shape in
                       ((12, 3, 3, 64), (12, 3, 40, 64), (12, 3, 40, 64)))
    padding = torch.arange(40)[None, :] >= (torch.arange(12) * 2 + 17)[:, None]  # (B, L): 17 to 39 keys
    mask = torch.zeros(padding.shape, dtype=dtype).masked_fill_(padding, float("-inf")).view(12, 1, 1, 40)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    expected = sdpa(q.float(), keys.float(), values.float(), attn_mask=mask.float())
    got = attention._attend_by_matmul(q, keys, values, mask)
    assert got.dtype == dtype and got.shape == expected.shape
    tolerance = 1e-5 if dtype == torch.float32 else 2**-7 * expected.abs().max().item()
    torch.testing.assert_close(got.float(), expected, atol=tolerance, rtol=0)
    unmasked = sdpa(q.float(), keys.float(), values.float())
    got = attention._attend_by_matmul(q, keys, values, None)
    torch.testing.assert_close(got.float(), unmasked, atol=tolerance, rtol=0)


def test_decodes_of_very_different_lengths_are_attended_in_groups_of_similar_length() -> None:
    from engines.reference.core.attention import MAX_DECODE_GROUPS, _similar_lengths

    assert _similar_lengths([0, 1, 2], [40, 44, 48], BLOCK_SIZE) == [[0, 1, 2]]  # little padding: one call
    # One long conversation among short ones gets a group of its own instead of padding them all.
    assert _similar_lengths([0, 1, 2, 3], [8, 400, 12, 9], BLOCK_SIZE) == [[0, 2, 3], [1]]
    lengths = [4 * 2**i for i in range(12)]
    assert len(_similar_lengths(list(range(12)), lengths, BLOCK_SIZE)) == MAX_DECODE_GROUPS


def test_rms_norm_gives_hugging_face_s_bits_but_for_a_rare_rounding() -> None:
    """bfloat16: normalised in float32, rounded, then scaled (LlamaRMSNorm's order). The normalising runs as a layer
    norm over [x, -x], whose float32 sums run in another order than LlamaRMSNorm's: a value that lies at a bfloat16
    rounding boundary may round to the next step. Measured: 70 of 9.2 million values; at most 1 in 10,000 here,
    each within a step, at a decode's and a prefill's number of rows."""
    mismatched = total = 0
    for seed in range(40):
        generator = torch.Generator().manual_seed(seed)
        rows = (1, 16, 80)[seed % 3]
        x = torch.randn(rows, 576, generator=generator).bfloat16() * (0.1 + seed % 7)
        weight = (torch.rand(576, generator=generator) + 0.5).bfloat16()
        expected = weight * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).bfloat16()
        out = rms_norm(x, weight, 1e-5)
        torch.testing.assert_close(out, expected, rtol=2**-6, atol=0)  # a bfloat16 step of the norm, then scaled
        mismatched += int((out != expected).sum())
        total += out.numel()
    assert mismatched <= total // 10_000, mismatched
