"""Speculative decoding measured on any engine: a level's drafts, acceptance and tokens per step from the server's
counters, and the client's tokens per chunk beside them. The scripted server plays speculation with known truth:
each chunk of 3 tokens is one draft of 4 tokens of which the first 2 were accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.run.rundir import read_run
from tests.bench.test_cli import bench, only_run_dir, sweep_args


@pytest.mark.parametrize("spec_report", ["llamacpp", "vllm"])  # each answer's figures: llama.cpp's timings, vLLM's
def test_a_levels_acceptance_equals_what_the_server_was_told(scripted, tmp_path: Path, spec_report: str) -> None:
    scripted.set_script(ttft_ms=20, itl_ms=30, tokens_per_chunk=3, spec_tokens=4, spec_report=spec_report)
    result = bench(*sweep_args(scripted, tmp_path, "--concurrency", "2", "--duration", "4", "--output-tokens", "30",
                               "--input-tokens", "20", "--no-report"), timeout=120)
    assert result.returncode == 0, result.stderr
    run = read_run(only_run_dir(tmp_path))
    (summary,) = run.summaries
    assert summary.tokens.mean_tokens_per_chunk == 3.0  # the client's own view: 30 tokens in 10 chunks
    assert summary.tokens.request_acceptance_rate == 0.5  # each answer's own figures (llama.cpp's timings)
    rows = [json.loads(line) for line in (only_run_dir(tmp_path) / "requests.jsonl").read_text().splitlines()]
    told = {(r.get("draft_tokens"), r.get("accepted_draft_tokens")) for r in rows if r["ok"] and not r["is_warmup"]}
    assert told == {(40, 20)}  # 10 chunks of 3 tokens, each a draft of 4 with 2 kept
    (view,) = run.server_views
    spec = view.spec
    assert spec is not None and spec.drafts and spec.drafts >= 10  # a level's growth, not the counters' totals
    assert spec.draft_tokens == 4 * spec.drafts and spec.accepted_tokens == 2 * spec.drafts
    assert spec.acceptance_rate == 0.5 and spec.mean_acceptance_length == 3.0
    assert spec.acceptance_by_position == (1.0, 1.0, 0.0, 0.0)
    assert "speculative decoding" in result.stdout and "50%" in result.stdout and "3.00" in result.stdout


def test_without_speculation_nothing_is_claimed(scripted, tmp_path: Path) -> None:
    scripted.set_script(ttft_ms=20, itl_ms=10)
    result = bench(*sweep_args(scripted, tmp_path, "--concurrency", "1", "--requests", "4", "--output-tokens", "8",
                               "--input-tokens", "20", "--no-report"), timeout=120)
    assert result.returncode == 0, result.stderr
    run = read_run(only_run_dir(tmp_path))
    assert run.summaries[0].tokens.mean_tokens_per_chunk == 1.0
    assert run.summaries[0].tokens.request_acceptance_rate is None
    assert all(view.spec is None for view in run.server_views)
    assert "speculative decoding" not in result.stdout
