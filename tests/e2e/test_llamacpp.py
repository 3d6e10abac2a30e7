"""llama.cpp's real server (from the xllamacpp package) launched, measured and stopped by `bench sweep`."""

from __future__ import annotations

import json

from tests.bench.test_cli import bench, only_run_dir
from tests.servers import is_running


def test_llamacpp_is_launched_measured_and_stopped(tmp_path) -> None:
    result = bench("sweep", "--engine", "llamacpp", "--concurrency", "1,4", "--requests", "4",
                   "--input-tokens", "32", "--output-tokens", "8", "--engine-arg", "parallel=4",
                   "--out", str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["engine"]["name"] == "llamacpp" and run["status"] == "complete"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [(row["level"], row["num_ok"], row["num_failed"]) for row in summary] == [("c1", 4, 0), ("c4", 4, 0)]
    assert all(row["mean_output_tokens"] == 8 for row in summary)
    assert not is_running(run["engine"]["details"]["pid"])


def test_unknown_engine_arg_for_the_embedded_server_names_what_it_takes(tmp_path) -> None:
    result = bench("sweep", "--engine", "llamacpp", "--engine-arg", "flash-attn=on", "--requests", "1",
                   "--out", str(tmp_path))
    assert result.returncode == 2
    assert "--engine-arg flash-attn: not understood" in result.stderr and "parallel" in result.stderr
