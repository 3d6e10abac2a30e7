"""The plan's memory and bandwidth arithmetic, worked by hand, and checked against the reference engine's own
KV cache sizing.

Llama-3.1-8B (GQA): 32 layers, 32 heads, 8 KV heads, head dim 128, hidden 4096, intermediate 14336, vocab 128256,
lm_head not tied.
- embeddings 128256 x 4096 = 525,336,576; lm_head the same
- per layer: q 4096 x 4096 = 16,777,216; k, v 4096 x 1024 each = 8,388,608; o 16,777,216;
  gate/up/down 3 x 4096 x 14336 = 176,160,768; two norms 8,192 -> 218,112,000; x 32 = 6,979,584,000
- final norm 4,096 -> 525,336,576 x 2 + 6,979,584,000 + 4,096 = 8,030,261,248 params = 16,060,522,496 bytes bf16
- KV per token 32 x 8 x 128 x 2 (K, V) x 2 bytes = 131,072 = 128 KiB; an 8,192-token sequence 1,073,741,824
On one H100 SXM (80 GB, 3.35 TB/s) at 0.9: 72,000,000,000 - 16,060,522,496 = 55,939,477,504 bytes of KV cache
-> 55,939,477,504 // 131,072 = 426,784 tokens (45,056 bytes over) -> 426,784 // 8,192 = 52 sequences (52.1).
Decode floor, full 8,192 tokens read per sequence:
- batch 1: 16,060,522,496 + 1,073,741,824 = 17,134,264,320 bytes / 3.35e12 B/s = 5.1147 ms -> 195.5 tokens/s
- batch 32: 16,060,522,496 + 32 x 1,073,741,824 = 50,420,260,864 bytes -> 15.0508 ms -> 66.44 tokens/s per user,
  2,126.1 in total
"""

from __future__ import annotations

import pytest

from costmodel.plan import PlanInputs, make_plan, parse_batches, plan_memory
from costmodel.plan_shapes import GpuShape, ModelShape, PlanError, resolve_gpu, valid_tensor_parallel_sizes

LLAMA_8B = ModelShape(
    "llama-3.1-8b",
    num_layers=32,
    num_heads=32,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=4096,
    intermediate_size=14336,
    vocab_size=128256,
    max_context_tokens=131072,
)
H100 = GpuShape("h100-sxm", memory_gb=80, bandwidth_tb_s=3.35)
L4 = GpuShape("l4", memory_gb=24, bandwidth_tb_s=0.3)


def test_llama_3_1_8b_weights_and_kv_per_token_are_the_hand_figures() -> None:
    memory = plan_memory(PlanInputs(LLAMA_8B, H100, "bfloat16", context_tokens=8192))
    assert memory.num_params == 8_030_261_248
    assert memory.weights_bytes == memory.weights_bytes_per_gpu == 16_060_522_496
    assert memory.kv_bytes_per_token == memory.kv_bytes_per_token_per_gpu == 131_072 == 128 * 1024


def test_llama_3_1_8b_on_one_h100_holds_52_sequences_of_8k() -> None:
    memory = plan_memory(PlanInputs(LLAMA_8B, H100, "bfloat16", context_tokens=8192))
    assert memory.usable_bytes_per_gpu == 72_000_000_000
    assert memory.kv_cache_bytes_per_gpu == 55_939_477_504
    assert memory.kv_tokens_that_fit == 426_784
    assert memory.sequences_that_fit == 52


def test_the_decode_floor_reads_the_weights_once_and_each_sequences_kv() -> None:
    plan = make_plan(PlanInputs(LLAMA_8B, H100, "bfloat16", context_tokens=8192), (1, 32))
    one, thirty_two = plan.ceilings
    assert one.bytes_read_per_step_per_gpu == 17_134_264_320
    assert one.decode_step_floor_ms == pytest.approx(5.1147, abs=1e-4)
    assert one.tokens_per_s_per_user_ceiling == one.tokens_per_s_total_ceiling == pytest.approx(195.51, abs=0.01)
    assert thirty_two.bytes_read_per_step_per_gpu == 50_420_260_864
    assert thirty_two.decode_step_floor_ms == pytest.approx(15.0508, abs=1e-4)
    assert thirty_two.tokens_per_s_per_user_ceiling == pytest.approx(66.44, abs=0.01)
    assert thirty_two.tokens_per_s_total_ceiling == pytest.approx(2126.1, abs=0.1)


def test_fewer_kv_tokens_read_lower_only_the_kv_part_of_a_step() -> None:
    # batch 32 reading 2,048 tokens each: 16,060,522,496 + 32 x 2,048 x 131,072 = 24,650,457,088 bytes
    plan = make_plan(PlanInputs(LLAMA_8B, H100, "bfloat16", context_tokens=8192, kv_tokens_read=2048), (32,))
    assert plan.ceilings[0].bytes_read_per_step_per_gpu == 24_650_457_088
    assert plan.memory.sequences_that_fit == 52  # what fits is still sized for the whole context


def test_the_default_batches_end_at_the_most_that_fit_and_never_pass_it() -> None:
    plan = make_plan(PlanInputs(LLAMA_8B, H100, "bfloat16", context_tokens=8192))
    assert [c.batch_size for c in plan.ceilings] == [1, 8, 32, 52]
    assert plan.batches_left_out == (128,)
    assert [c.batch_size for c in make_plan(plan.inputs, (4, 60, 52)).ceilings] == [4, 52]


def test_tensor_parallel_splits_weights_and_kv_heads() -> None:
    # TP 2: 8,030,261,248 bytes and 32 x 4 x 128 x 2 x 2 = 65,536 bytes/token per GPU;
    # (72e9 - 8,030,261,248) = 63,969,738,752 // 65,536 = 976,100 tokens (976,100.3) -> 119 sequences of 8,192
    memory = plan_memory(PlanInputs(LLAMA_8B, H100, "bfloat16", tensor_parallel_size=2, context_tokens=8192))
    assert (memory.weights_bytes_per_gpu, memory.kv_bytes_per_token_per_gpu) == (8_030_261_248, 65_536)
    assert (memory.kv_tokens_that_fit, memory.sequences_that_fit) == (976_100, 119)
    assert memory.kv_bytes_per_token == 131_072


def test_past_one_kv_head_per_gpu_the_heads_are_replicated() -> None:
    # TP 16 over 8 KV heads: each GPU keeps one, 32 x 1 x 128 x 2 x 2 = 16,384 bytes/token
    memory = plan_memory(PlanInputs(LLAMA_8B, H100, "bfloat16", tensor_parallel_size=16))
    assert (memory.kv_heads_per_gpu, memory.kv_bytes_per_token_per_gpu) == (1, 16_384)
    assert valid_tensor_parallel_sizes(LLAMA_8B) == [1, 2, 4, 8, 16, 32]


def test_smaller_dtypes_scale_the_bytes() -> None:
    # int4: 8,030,261,248 x 0.5 = 4,015,130,624; fp8 KV: 32 x 8 x 128 x 2 x 1 = 65,536
    memory = plan_memory(PlanInputs(LLAMA_8B, H100, "int4", kv_dtype="fp8"))
    assert (memory.weights_bytes, memory.kv_bytes_per_token) == (4_015_130_624, 65_536)
    assert PlanInputs(LLAMA_8B, H100, "BF16").dtype == "bfloat16"


def test_measured_file_bytes_win_unless_a_dtype_is_asked_for() -> None:
    gguf = ModelShape(**{**LLAMA_8B.__dict__, "file_weights_bytes": 4_900_000_000, "file_dtype": "GGUF Q4_K"})
    assert plan_memory(PlanInputs(gguf, H100)).weights_bytes == 4_900_000_000
    assert plan_memory(PlanInputs(gguf, H100)).weights_dtype == "GGUF Q4_K"
    assert plan_memory(PlanInputs(gguf, H100, "bfloat16")).weights_bytes == 16_060_522_496


def test_weights_that_do_not_fit_say_what_would_help() -> None:
    # float32: 32.12 GB of weights > 0.9 x 24 GB = 21.6 GB of an L4
    inputs = PlanInputs(LLAMA_8B, L4, "float32", context_tokens=8192)
    assert plan_memory(inputs).kv_cache_bytes_per_gpu < 0
    with pytest.raises(
        PlanError,
        match=r"does not fit: .*32\.12 GB of weights per GPU.*21\.60 GB.*"
        r"would help: --tensor-parallel-size 2, or --dtype bfloat16",
    ):
        make_plan(inputs)


def test_a_context_whose_one_sequence_does_not_fit_says_how_much_would() -> None:
    # bf16 on an L4: 21.6e9 - 16,060,522,496 = 5,539,477,504 bytes; // 131,072 = 42,262 tokens, less than 131,072
    with pytest.raises(PlanError, match=r"one 131072-token sequence.*--context 42262 or less"):
        make_plan(PlanInputs(LLAMA_8B, L4, "bfloat16"))


@pytest.mark.parametrize(
    ("changes", "flag"),
    [
        ({"dtype": "fp4"}, "--dtype 'fp4': unknown; accepted: bfloat16"),
        ({"kv_dtype": "int4"}, "--kv-dtype 'int4': unknown; accepted: bfloat16, float16, float32, fp8"),
        ({"tensor_parallel_size": 3}, "--tensor-parallel-size 3: .* accepted: 1, 2, 4, 8, 16, 32"),
        ({"context_tokens": 200_000}, "--context 200000: expected 1 to llama-3.1-8b's own context of 131072"),
        ({"memory_fraction": 1.5}, r"--memory-fraction 1.5: expected a share in \(0, 1\]"),
        ({"context_tokens": 8192, "kv_tokens_read": 9000}, r"--kv-tokens-read 9000: expected 1 to the context"),
    ],
)
def test_bad_inputs_name_their_flag(changes: dict, flag: str) -> None:
    with pytest.raises(PlanError, match=flag):
        PlanInputs(LLAMA_8B, H100, **changes)


def test_gpus_come_from_the_catalog_or_from_their_two_figures() -> None:
    assert resolve_gpu("h100") == H100  # an alias
    assert resolve_gpu("h100-sxm", memory_gb=94) == GpuShape("h100-sxm", 94, 3.35)
    assert resolve_gpu("my-card", 48, 1.0) == GpuShape("my-card", 48, 1.0)
    with pytest.raises(PlanError, match=r"--gpu 'h100sxm': unknown GPU \(did you mean h100-sxm.*known: h100-sxm"):
        resolve_gpu("h100sxm")
    with pytest.raises(PlanError, match="--gpu: give a GPU name"):
        resolve_gpu(None)


def test_batch_sizes_parse_or_name_the_flag() -> None:
    assert parse_batches("1, 8,32") == (1, 8, 32)
    for bad in ("", "0,8", "1,x"):
        with pytest.raises(PlanError, match="--batch"):
            parse_batches(bad)


def test_the_reference_engines_kv_capacity_for_a_budget_is_the_plans_within_one_block(monkeypatch) -> None:
    """The engine sizes its cache from free memory x fraction; given the same bytes, the plan's KV tokens and
    the blocks the engine allocates differ by less than one block."""
    import torch

    from bench.inputs.model_shape import model_shape
    from engines.reference.core import memory
    from engines.reference.core.config import EngineConfig
    from engines.reference.loading.weights import resolve_model

    loaded = resolve_model("dummy:tiny", dtype=torch.bfloat16)
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    shape = model_shape("dummy:tiny")
    for budget in (1_000_000, 1_234_567, 4_000_037):  # bytes for the KV cache; tiny's 256 B/token -> < 16,384
        monkeypatch.setattr(memory, "free_memory_bytes", lambda device, budget=budget: budget)
        engine = EngineConfig.for_kv_cache_tokens(memory.default_kv_cache_tokens(loaded, 1.0), max_model_len=16)
        gpu = GpuShape("budget", (weights + budget) / 1e9, 1.0)
        plan = plan_memory(PlanInputs(shape, gpu, "bfloat16", context_tokens=16, memory_fraction=1.0))
        assert plan.weights_bytes == weights
        assert plan.kv_cache_bytes_per_gpu == budget
        assert plan.kv_bytes_per_token == memory.kv_cache_bytes_per_token(loaded)
        assert 0 <= plan.kv_tokens_that_fit - engine.kv_cache_tokens < engine.block_size
