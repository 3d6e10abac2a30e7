"""A level measured while another program used the machine says so, naming it; the run's own server does not
count as other work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_cli import bench, only_run_dir
from tests.servers import ScriptedServer

pytestmark = [pytest.mark.serial,  # it keeps a core busy on purpose
              pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="reads Linux's /proc")]

BUSY_S = 6.0  # longer than the level; it ends by itself even if the test is stopped
BUSY = f"import time\nend = time.monotonic() + {BUSY_S}\nwhile time.monotonic() < end: pass\n"


def test_a_level_beside_a_busy_program_notes_it_by_name_in_the_summary_and_the_report(
        scripted: ScriptedServer, tmp_path: Path) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=5)
    out = tmp_path / "runs"
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        result = bench("sweep", "--engine", "endpoint", "--base-url", scripted.base_url, "--model", "scripted",
                       "--concurrency", "2", "--duration", "2", "--output-tokens", "8", "--input-tokens", "16",
                       "--out", str(out), timeout=120)
    finally:
        busy.kill()
        busy.wait()
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(out)
    (level,) = [json.loads(line) for line in (run_dir / "levels.jsonl").read_text().splitlines()]
    machine = level["machine"]
    assert machine["others_cpu_s"] / machine["wall_s"] > 0.5  # the busy loop had most of a core
    named = {p["pid"]: p for p in machine["busiest"]}
    assert busy.pid in named and named[busy.pid]["cpu_s"] > 0.5 * machine["wall_s"]
    assert scripted.process.pid not in named  # the endpoint's server is the run's own

    (summary,) = json.loads((run_dir / "summary.json").read_text())
    (note,) = [n for n in summary["notes"] if "the machine was busy" in n]
    assert f"(pid {busy.pid})" in note
    assert summary["is_valid"]  # said, not held against the level
    assert f"(pid {busy.pid})" in (run_dir / "report.md").read_text()
    header = (run_dir / "summary.csv").read_text().splitlines()[0].split(",")
    assert "others_cpu_cores" in header and "steal_cores" in header
