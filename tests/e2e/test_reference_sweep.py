"""The reference engine launched as a process by `bench sweep`: started, measured, stopped, nothing left."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from bench.run.rundir import read_run
from tests.bench.test_cli import BENCH, bench, only_run_dir
from tests.servers import is_running


def _sweep_tiny(tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess[str], Path, dict[str, Any]]:
    """`bench sweep` of the reference engine on the tiny dummy model: its output, run directory and run.json."""
    result = bench("sweep", "--model", "dummy:tiny", "--input-tokens", "32", *flags, "--out", str(tmp_path),
                   timeout=180)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    return result, run_dir, json.loads((run_dir / "run.json").read_text())


def test_sweep_launches_measures_and_stops_the_reference_engine(tmp_path) -> None:
    _, run_dir, run = _sweep_tiny(tmp_path, "--concurrency", "1,4", "--requests", "8", "--output-tokens", "8")
    assert run["status"] == "complete"
    assert run["engine"]["name"] == "reference" and run["engine"]["launched_by"] == "bench"
    assert run["engine"]["details"]["time_to_ready_s"] > 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [(row["level"], row["num_ok"], row["num_failed"]) for row in summary] == [("c1", 8, 0), ("c4", 8, 0)]
    assert all(row["mean_output_tokens"] == 8 for row in summary)
    assert "reference engine ready" in (run_dir / "engine.log").read_text()
    assert not is_running(run["engine"]["details"]["pid"])


def test_an_engine_that_fails_to_start_reports_its_log_and_keeps_it(tmp_path) -> None:
    result = bench("sweep", "--model", "/no/such/model.gguf", "--requests", "1", "--out", str(tmp_path),
                   timeout=180)
    assert result.returncode == 2
    assert "reference exited with code" in result.stderr
    assert "/no/such/model.gguf" in result.stderr
    run_dir = only_run_dir(tmp_path)
    assert json.loads((run_dir / "run.json").read_text())["status"].startswith("failed")
    assert (run_dir / "engine.log").is_file()


def test_the_servers_own_metrics_are_sampled_while_levels_run(tmp_path) -> None:
    result, run_dir, run = _sweep_tiny(tmp_path, "--concurrency", "4", "--duration", "4", "--output-tokens", "48")
    assert run["telemetry"]["sampled"] is True and run["telemetry"]["metrics_url"].endswith("/metrics")
    samples = [json.loads(line) for line in (run_dir / "telemetry.jsonl").read_text().splitlines()]
    assert len(samples) >= 3 and all("requests_running" in s and "kv_cache_usage" in s for s in samples)
    (view,) = read_run(run_dir).server_views
    assert view.level == "c4" and view.num_samples >= 3
    assert 1 <= view.mean_running <= 4 and view.mean_waiting is not None and 0 < view.max_kv_cache_usage <= 1
    assert "the server's own metrics" in result.stdout
    assert "The server's own metrics while each level ran" in (run_dir / "report.md").read_text()
    assert not _pids_with_argument(str(run_dir)), "the sampler outlived the sweep"


def _pids_with_argument(argument: str) -> list[int]:
    """Processes whose command line holds `argument` (the sampler is started with the run directory's path)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and argument in (proc / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.serial  # killed outright, its engine is a leftover for a moment, which other tests would see
def test_a_sweep_killed_outright_leaves_no_engine_and_no_sampler(tmp_path) -> None:
    """SIGKILL gives the sweep no chance to stop anything: within 5 s its engine and sampler are gone anyway."""
    process = subprocess.Popen([*BENCH, "sweep", "--model", "dummy:tiny", "--input-tokens", "32", "--output-tokens",
                                "16", "--concurrency", "2", "--duration", "60", "--no-report", "--out", str(tmp_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(p.stat().st_size for p in tmp_path.glob("*/requests.jsonl")):
            time.sleep(0.1)
        run_dir = only_run_dir(tmp_path)
        engine_pid = json.loads((run_dir / "run.json").read_text())["engine"]["details"]["pid"]
        assert is_running(engine_pid)
        process.send_signal(signal.SIGKILL)
        process.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (is_running(engine_pid) or _pids_with_argument(str(run_dir))):
            time.sleep(0.05)
    finally:
        process.kill()
    assert not is_running(engine_pid), "the engine outlived the sweep"
    assert not _pids_with_argument(str(run_dir)), "the sampler or the watcher outlived the sweep"
