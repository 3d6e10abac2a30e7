"""`bench import --from vllm`: `vllm bench serve --save-result` files (written here in vLLM's shape, from its
documented fields) as a run directory that the rest of the toolkit reads like a measured one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from bench.run.rundir import read_run


def detailed_file(path: Path) -> Path:
    """20 requests at most 4 at once, each request's timings given (--save-detailed); the last one failed."""
    rng = np.random.default_rng(3)
    ttfts = list(rng.uniform(0.08, 0.2, 20))
    outs = [16] * 19 + [0]
    itls = [list(rng.uniform(0.015, 0.025, out - 1)) for out in outs[:-1]] + [[]]
    latencies = [t + sum(i) for t, i in zip(ttfts, itls, strict=True)]
    path.write_text(json.dumps({
        "date": "20261201-120000", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": 20, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 4, "duration": 2.5,
        "completed": 19, "failed": 1, "total_input_tokens": 19 * 128, "total_output_tokens": 19 * 16,
        "request_throughput": 7.6, "request_goodput": None, "output_throughput": 121.6,
        "total_token_throughput": 1094.4, "mean_ttft_ms": 140.0, "median_ttft_ms": 139.0, "p99_ttft_ms": 199.0,
        "input_lens": [128] * 20, "output_lens": outs, "ttfts": [*ttfts[:-1], 0.0], "itls": itls,
        "latencies": [*latencies[:-1], 0.0], "start_times": [i * 0.1 for i in range(20)],
        "generated_texts": [""] * 20, "errors": [""] * 19 + ["Internal Server Error"]}))
    return path


def aggregate_file(path: Path) -> Path:
    """A level at 2 requests/s saved without per-request lists: the aggregates only, p99 and no p95."""
    path.write_text(json.dumps({
        "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": 100, "request_rate": 2.0,
        "max_concurrency": None, "duration": 50.0, "completed": 100, "failed": 0, "total_input_tokens": 25600,
        "total_output_tokens": 12800, "request_throughput": 2.0, "output_throughput": 256.0,
        "total_token_throughput": 768.0, "mean_ttft_ms": 95.0, "median_ttft_ms": 90.0, "p99_ttft_ms": 180.0,
        "mean_tpot_ms": 21.0, "median_tpot_ms": 20.5, "p99_tpot_ms": 30.0, "mean_itl_ms": 21.0,
        "median_itl_ms": 20.0, "p99_itl_ms": 40.0, "mean_e2el_ms": 2800.0, "median_e2el_ms": 2750.0,
        "p99_e2el_ms": 3500.0}))
    return path


def test_vllm_results_become_a_run_read_like_a_measured_one(tmp_path: Path, cli) -> None:
    detailed, aggregate = detailed_file(tmp_path / "c4.json"), aggregate_file(tmp_path / "r2.json")
    result = cli("import", str(detailed), str(aggregate), "--from", "vllm", "--out", str(tmp_path / "runs"))
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["imported"]["tool"] == "vllm" and info["engine"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert [f["sha256"] for f in info["imported"]["files"]] == [
        hashlib.sha256(p.read_bytes()).hexdigest() for p in (detailed, aggregate)]
    run = read_run(run_dir)
    c4, r2 = run.summaries
    # the detailed level is rebuilt request by request: its figures are the requests'
    raw = json.loads(detailed.read_text())
    assert (c4.level, c4.kind, c4.requests.num_ok, c4.requests.num_failed) == ("c4", "concurrency", 19, 1)
    assert c4.latency.ttft_ms.p50 == pytest.approx(np.percentile(np.array(raw["ttfts"][:-1]) * 1000, 50))
    assert c4.tokens.mean_output_tokens == 16 and c4.tokens.mean_input_tokens == 128
    assert any("imported from vllm bench serve (000-c4.json)" in note for note in c4.notes)
    # the aggregate level has the file's figures and says what it lacks
    assert (r2.level, r2.kind, r2.throughput.output_tokens_per_s) == ("r2", "rate", 256.0)
    assert r2.latency.ttft_ms.p50 == 90.0 and r2.latency.ttft_ms.p99 == 180.0 and r2.latency.ttft_ms.p95 is None
    assert r2.latency.icl_ms.p50 == 20.0  # vLLM's ITL is a gap between chunks: our ICL
    assert any("no per-request records" in note for note in r2.notes)
    assert not run.cut_short
    report = cli("report", str(run_dir), "--gpu-price", "2", "--provider", "llama-3.1-8b",
                 "--out", str(tmp_path / "report.html"))
    assert report.exit_code == 0, report.output
    markdown = (tmp_path / "report.md").read_text()
    assert "r2" in markdown and f"imported from vllm: {detailed.resolve()}" in markdown  # its provenance said
    # exported as llm-d reports: the detailed level from its requests, the other from the file's figures
    exported = cli("export", str(run_dir), "--format", "llmd-report", "--out", str(tmp_path / "out"))
    assert exported.exit_code == 0, exported.output
    c4_report = json.loads((tmp_path / "out" / "benchmark-report-c4.json").read_text())
    ttft = c4_report["metrics"]["latency"]["time_to_first_token"]
    assert ttft["p50"] == pytest.approx(c4.latency.ttft_ms.p50) and ttft["min"] == pytest.approx(
        min(raw["ttfts"][:-1]) * 1000)
    r2_report = json.loads((tmp_path / "out" / "benchmark-report-r2.json").read_text())
    assert r2_report["metrics"]["latency"]["time_to_first_token"] == {"units": "ms", "mean": 95.0, "p50": 90.0,
                                                                      "p99": 180.0}


def test_an_slo_on_a_p95_the_file_lacks_makes_the_level_invalid(tmp_path: Path) -> None:
    from bench.flows.importing import import_results
    from loadgen.types import SLO

    run_dir = import_results([aggregate_file(tmp_path / "r2.json")], "vllm", tmp_path / "runs")
    (r2,) = read_run(run_dir, SLO(ttft_ms=500)).summaries
    assert not r2.is_valid and "no p95 TTFT" in r2.invalid_reasons[0]


def test_a_file_that_is_not_what_from_says_is_refused_naming_the_field(tmp_path: Path, cli) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"completed": 3, "duration": "long"}))
    said = cli("import", str(bad), "--from", "vllm", "--out", str(tmp_path / "runs"))
    assert said.exit_code == 2 and "duration is 'long'" in said.output
    assert not (tmp_path / "runs").exists()  # nothing written
    said = cli("import", str(bad), "--from", "locust", "--out", str(tmp_path / "runs"))
    assert said.exit_code == 2 and "--from locust: expected one of vllm, guidellm, aiperf" in said.output
    assert not (tmp_path / "runs").exists()


def test_files_at_the_same_load_are_its_repeats(tmp_path: Path) -> None:
    from bench.flows.importing import import_results

    first = aggregate_file(tmp_path / "a.json")
    raw = json.loads(first.read_text())
    (tmp_path / "b.json").write_text(json.dumps({**raw, "output_throughput": 240.0}))
    run_dir = import_results([first, tmp_path / "b.json"], "vllm", tmp_path / "runs")
    run = read_run(run_dir)
    assert [(s.level, s.base_level, s.repeat) for s in run.summaries] == [("r2", "r2", 1), ("r2#2", "r2", 2)]
    (repeated,) = run.repeated
    assert repeated.figures["output_tokens_per_s"].values == (256.0, 240.0)
    assert json.loads((run_dir / "repeats.json").read_text())[0]["labels"] == ["r2", "r2#2"]
