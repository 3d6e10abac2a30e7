"""vLLM for real, as a local process: opt-in (`pytest -m vllm`), since vLLM is installed apart from the
toolkit (README: Engines). The default model is SmolLM2-135M, converted once from its GGUF to safetensors."""

from __future__ import annotations

import json
import os

import pytest

from bench.run.rundir import read_run
from tests.bench.test_cli import bench, only_run_dir
from tests.e2e.test_secrets import CommandLines
from tests.servers import is_running

pytestmark = pytest.mark.vllm


def test_vllm_is_launched_measured_and_stopped(tmp_path) -> None:
    assert os.environ.get("BENCH_VLLM_PYTHON"), "set BENCH_VLLM_PYTHON to the python of vLLM's environment"
    result = bench("sweep", "--engine", "vllm", "--concurrency", "1,4", "--requests", "8", "--input-tokens", "32",
                   "--output-tokens", "16", "--engine-arg", "max-model-len=2048",
                   "--no-report", "--out", str(tmp_path), timeout=900)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["engine"]["name"] == "vllm" and run["status"] == "complete"
    # no GPU here: the CPU build gets a share of RAM for its KV cache that leaves room for the rest
    assert run["engine"]["details"]["engine_args"]["gpu-memory-utilization"] == "0.3"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [(row["level"], row["num_ok"], row["num_failed"]) for row in summary] == [("c1", 8, 0), ("c4", 8, 0)]
    assert all(row["mean_output_tokens"] == 16 for row in summary)
    assert not is_running(run["engine"]["details"]["pid"])


def test_vllm_serves_the_adapters_bench_gives_it(tmp_path) -> None:
    """`bench lora make` adapters for SmolLM2's shape, given to vLLM as --enable-lora --lora-modules: every request
    is answered by the adapter it asked for, and vLLM's LoRA series is read."""
    assert os.environ.get("BENCH_VLLM_PYTHON"), "set BENCH_VLLM_PYTHON to the python of vLLM's environment"
    made = bench("lora", "make", "--base", "default", "--rank", "8", "--count", "2", "--out", str(tmp_path / "ad"))
    assert made.returncode == 0, made.stderr
    result = bench("sweep", "--engine", "vllm", "--adapters-dir", str(tmp_path / "ad"), "--concurrency", "2",
                   "--requests", "8", "--input-tokens", "32", "--output-tokens", "16",
                   "--engine-arg", "max-model-len=2048", "--no-report", "--out", str(tmp_path / "runs"), timeout=900)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    command = json.loads((run_dir / "run.json").read_text())["engine"]["details"]["command"]
    assert "--enable-lora" in command and command[command.index("--max-lora-rank") + 1] == "8"
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in rows if not r["is_warmup"]]
    assert len(measured) == 8 and all(r["ok"] for r in measured)
    assert {r["adapter"] for r in measured} == {"lora-0", "lora-1"}
    samples = [json.loads(line) for line in (run_dir / "telemetry.jsonl").read_text().splitlines()]
    assert any("running_adapters" in s for s in samples)  # vllm:lora_requests_info, as the sampler reads it


def test_vllm_given_a_key_gets_it_by_its_environment_and_no_file_holds_it(tmp_path) -> None:
    """`--engine-arg api-key=...` reaches vLLM as VLLM_API_KEY, never its command line; bench's own checks and
    client send it (the sweep succeeds against a server that refuses keyless requests), and the run directory
    keeps `***`: the canary is in no file bench or vLLM wrote."""
    assert os.environ.get("BENCH_VLLM_PYTHON"), "set BENCH_VLLM_PYTHON to the python of vLLM's environment"
    canary = "sk-canary-vllm-5d2b9e"
    with CommandLines([canary]).running() as seen:
        result = bench("sweep", "--engine", "vllm", "--concurrency", "2", "--requests", "4", "--input-tokens", "32",
                       "--output-tokens", "8", "--engine-arg", "max-model-len=2048",
                       "--engine-arg", f"api-key={canary}", "--no-report", "--out", str(tmp_path), timeout=900)
    assert result.returncode == 0, result.stderr
    assert seen.leaks == []  # on no command line of vLLM's processes
    assert seen.keyless_status and set(seen.keyless_status.values()) == {401}  # vLLM wanted the key
    run_dir = only_run_dir(tmp_path)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete" and "--api-key" not in run["engine"]["details"]["command"]
    assert run["engine_spec"]["args"]["api-key"] == "***"
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert canary.encode() not in path.read_bytes(), path
    assert canary not in result.stdout + result.stderr


def test_vllm_speculation_and_json_schema_are_read(tmp_path) -> None:
    """vLLM's CPU build with prompt-lookup speculation and per-request figures, on the copy-heavy edit workload:
    each level's acceptance from vLLM's spec_decode counters and each record's from its own metrics, adding up;
    then the shipped structured scenario, answered under its schema by vLLM's own xgrammar and judged valid."""
    assert os.environ.get("BENCH_VLLM_PYTHON"), "set BENCH_VLLM_PYTHON to the python of vLLM's environment"
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4})
    result = bench("sweep", "--engine", "vllm", "--scenario", "edit", "--concurrency", "1", "--requests", "4",
                   "--engine-arg", "max-model-len=2048", "--engine-arg", f"speculative-config={spec}",
                   "--engine-arg", "per-request-spec-decode-metrics=summary", "--no-report",
                   "--out", str(tmp_path / "spec"), timeout=900)
    assert result.returncode == 0, result.stderr
    run = read_run(only_run_dir(tmp_path / "spec"))
    (view,) = run.server_views
    assert view.spec is not None and view.spec.drafts and view.spec.drafts > 0
    assert 0 < view.spec.accepted_tokens <= view.spec.draft_tokens
    rows = [json.loads(line) for line in (only_run_dir(tmp_path / "spec") / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in rows if not r["is_warmup"] and r["ok"]]
    assert measured and all(r["draft_tokens"] and r["accepted_draft_tokens"] <= r["draft_tokens"] for r in measured)
    shaped = bench("sweep", "--engine", "vllm", "--scenario", "structured", "--concurrency", "2", "--requests", "6",
                   "--engine-arg", "max-model-len=2048", "--no-report", "--out", str(tmp_path / "json"), timeout=900)
    assert shaped.returncode == 0, shaped.stderr
    (summary,) = read_run(only_run_dir(tmp_path / "json")).summaries
    assert summary.validity is not None and summary.validity.n == 6 and summary.validity.valid == 1.0
