"""A sweep of an engine started here reads its GPUs; the report gives each level's power and energy per
output token. The GPUs are the stand-in nvidia-smi's (two at 312.45 W); the engine is the reference one."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.bench.test_cli import bench, only_run_dir


def test_a_sweep_reads_the_gpus_and_the_report_gives_joules_per_token(standin_gpus: Path, tmp_path) -> None:
    result = bench("sweep", "--model", "dummy:tiny", "--input-tokens", "32", "--output-tokens", "16",
                   "--concurrency", "1,4", "--duration", "2", "--out", str(tmp_path),
                   env={"PATH": os.environ["PATH"]}, timeout=240)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["telemetry"]["gpu"] == {"sampled": True, "reader": "nvidia-smi"}
    report = json.loads((run_dir / "report.json").read_text())
    energy = report["engines"][0]["energy"]
    assert energy["measured"] and energy["num_gpus"] == 2 and energy["names"] == ["NVIDIA H100 80GB HBM3"]
    levels = {lv["label"]: lv for lv in energy["levels"]}
    summary = {row["level"]: row for row in json.loads((run_dir / "summary.json").read_text())}
    for label in ("c1", "c4"):
        assert levels[label]["mean_power_w"] == pytest.approx(624.9)
        assert levels[label]["joules_per_output_token"] == pytest.approx(624.9 / summary[label]["output_tokens_per_s"])
    assert "power" in {plot["name"] for plot in report["plots"]}
    assert "J / output token" in (run_dir / "report.md").read_text()


def test_without_a_gpu_the_run_and_the_report_say_why(tmp_path) -> None:
    result = bench("sweep", "--model", "dummy:tiny", "--input-tokens", "16", "--output-tokens", "4",
                   "--concurrency", "1", "--requests", "2", "--out", str(tmp_path),
                   env={"PATH": str(Path(sys.executable).parent)}, timeout=180)  # no nvidia-smi there
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    gpu = json.loads((run_dir / "run.json").read_text())["telemetry"]["gpu"]
    assert gpu["sampled"] is False and "no nvidia-smi on PATH" in gpu["why_not"]
    assert "GPU power not measured: " in (run_dir / "report.md").read_text()
