"""Client workers as Ray actors (`--ray`) on a real local Ray cluster, started for these tests on 127.0.0.1
and stopped after them. Opt-in (`pytest -m ray`): Ray lives in an environment of its own, $BENCH_RAY
(see the README), and a cluster takes seconds to start."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from loadgen.recorder import read_records
from tests.bench.test_cli import only_run_dir, sweep_args
from tests.e2e.test_workers import wait_for_measured
from tests.servers import ScriptedServer, is_running

pytestmark = pytest.mark.ray
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Cluster:
    address: str
    python: str
    env: dict[str, str]

    def bench(self, *args: str) -> list[str]:
        return [self.python, "-m", "bench", *args]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    home = os.environ.get("BENCH_RAY")
    if not home:
        pytest.fail("set BENCH_RAY to an environment with ray and the toolkit's dependencies (see the README)")
    ray, python = Path(home, "bin", "ray"), Path(home, "bin", "python")
    if not ray.is_file():
        pytest.fail(f"$BENCH_RAY={home} holds no bin/ray")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Ray refuses 127.0.0.1 as a node's address unless told it is a single-machine cluster; told so, every
    # one of its servers listens on loopback only.
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONPATH": str(REPO),
           "RAY_worker_niceness": "0"}  # Ray's default of 15 puts the actors behind the server on these 2 cores
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    subprocess.run([str(ray), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
                    "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
                   check=True, env=env, timeout=180, capture_output=True)
    try:
        yield Cluster(f"127.0.0.1:{port}", str(python), env)
    finally:
        subprocess.run([str(ray), "stop", "--force"], env=env, timeout=120, capture_output=True)


def test_a_ray_level_measures_the_programmed_truth_at_256_users(cluster, scripted: ScriptedServer, tmp_path) -> None:
    result = subprocess.run(cluster.bench(*sweep_args(scripted, tmp_path, "--concurrency", "256", "--duration", "4",
                                                      "--output-tokens", "24", "--workers", "2", "--ray",
                                                      cluster.address, "--no-report")),
                            capture_output=True, text=True, timeout=300, env=cluster.env)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    (summary,) = json.loads((run_dir / "summary.json").read_text())
    assert summary["num_failed"] == 0 and summary["num_workers"] == 2 and summary["is_valid"], summary
    assert summary["ttft_ms"]["p50"] == pytest.approx(100.0, abs=5.0)
    assert summary["itl_ms"]["p50"] == pytest.approx(20.0, rel=0.03)
    assert summary["mean_in_flight"] == pytest.approx(256, rel=0.05)
    (level,) = [json.loads(line) for line in (run_dir / "levels.jsonl").read_text().splitlines()]
    workers = level["workers"]
    assert [w["users"] for w in workers] == [128, 128]
    assert all(abs(w["clock_offset_ms"]) <= w["clock_uncertainty_ms"] + 0.05 for w in workers)  # one machine
    assert [w["nice"] for w in workers] == [0, 0]
    # nothing said of the workers (what else this machine did meanwhile is the machine's, not theirs; the
    # requests in flight at the end of 4 s take up to 0.6 s more, which the level says of itself)
    assert [note for note in summary["notes"] if not note.startswith(("the machine was busy", "ran "))] == []
    records = [r for r in read_records(run_dir / "requests.jsonl") if not r.is_warmup]
    assert len({r.request_id for r in records}) == len(records) == level["num_records"]
    assert {r.worker for r in records} == {0, 1}
    assert json.loads((run_dir / "run.json").read_text())["client"] == {
        "strict_openai": False, "tokenizer": None, "on_throttle": "retry", "workers": 2, "ray": cluster.address}
    _wait_until_gone([w["pid"] for w in workers])  # each level's actors are killed with it


def test_a_ray_worker_killed_mid_level_fails_the_level_and_leaves_no_actor(cluster, scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=10)
    process = subprocess.Popen(cluster.bench(*sweep_args(scripted, tmp_path, "--concurrency", "8", "--duration",
                                                         "60", "--output-tokens", "10", "--workers", "2", "--ray",
                                                         cluster.address, "--no-report")),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cluster.env)
    try:
        actors = _wait_for_actors(count=2)
        wait_for_measured(tmp_path, at_least=16)
        os.kill(actors[1], signal.SIGKILL)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 2, stderr  # its one engine not measured: as when an engine dies
    said = f"client worker [01] \\(pid {actors[1]} on [^)]+\\) died mid-level"
    assert re.search(said, " ".join(stderr.split())), stderr
    run_dir = only_run_dir(tmp_path)
    assert re.match("failed: WorkerFailed: " + said, json.loads((run_dir / "run.json").read_text())["status"])
    records = [r for r in read_records(run_dir / "requests.jsonl") if not r.is_warmup]
    assert len(records) >= 16 and {r.worker for r in records} == {0, 1}
    _wait_until_gone(actors)


def _actor_pids() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"ray::_Actor"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return sorted(found)


def _wait_for_actors(count: int, timeout_s: float = 120) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(pids := _actor_pids()) >= count:
            return pids
        time.sleep(0.1)
    raise AssertionError(f"{count} Ray actors did not start")


def _wait_until_gone(pids: list[int], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while any(is_running(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still running: {[pid for pid in pids if is_running(pid)]}"
        time.sleep(0.1)
