"""Real run directories for report tests: `bench sweep` as a user runs it, against the scripted server.

Session-scoped, so the few seconds of sweeping are paid once for every report test.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.servers import ScriptedServer

BENCH = [sys.executable, "-m", "bench"]


def sweep(server: ScriptedServer, out: Path, *extra: str) -> Path:
    result = subprocess.run([*BENCH, "sweep", "--engine", "endpoint", "--base-url", server.base_url, "--model",
                             "scripted", "--out", str(out), "--output-tokens", "16", "--input-tokens",
                             "uniform:40:80", *extra], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith('.')]
    return run_dir


@pytest.fixture(scope="session")
def complete_run(_scripted_server_process: ScriptedServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three closed-loop levels of 12 requests each, TTFT 20 ms, 5 ms per token: the chat scenario's SLO holds."""
    _scripted_server_process.set_script(ttft_ms=20, itl_ms=5)
    return sweep(_scripted_server_process, tmp_path_factory.mktemp("complete"), "--concurrency", "1,4,8",
                 "--requests", "12")


@pytest.fixture(scope="session")
def slower_run(_scripted_server_process: ScriptedServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second 'engine': twice as slow per token."""
    _scripted_server_process.set_script(ttft_ms=40, itl_ms=10)
    return sweep(_scripted_server_process, tmp_path_factory.mktemp("slower"), "--concurrency", "1,4",
                 "--requests", "8")


@pytest.fixture(scope="session")
def interrupted_run(_scripted_server_process: ScriptedServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep stopped with Ctrl-C during its first level: c2 cut short, c8 never started."""
    _scripted_server_process.set_script(ttft_ms=10, itl_ms=5)
    out = tmp_path_factory.mktemp("interrupted")
    server = _scripted_server_process
    process = subprocess.Popen([*BENCH, "sweep", "--engine", "endpoint", "--base-url", server.base_url,
                                "--model", "scripted", "--out", str(out), "--concurrency", "2,8", "--duration", "30",
                                "--output-tokens", "16"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            files = list(out.glob("*/requests.jsonl"))
            if files and len(files[0].read_text().splitlines()) >= 10:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=20)
    finally:
        process.kill()
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith('.')]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    return run_dir
