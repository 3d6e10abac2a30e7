"""A level split across client worker processes (`--workers N`) against the scripted server: the same
figures as one process, every request once, each worker judged by its own check, and a worker that dies
mid-level ending the level with its records kept and no process left."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from loadgen.arrivals import Level, arrival_offsets
from loadgen.client import ClientOptions
from loadgen.columns import columns_of
from loadgen.datasets import iter_requests
from loadgen.metrics import summarize_columns
from loadgen.pool import ClientPool, SplitResult, run_split_level, split_shares
from loadgen.recorder import JsonlWriter, read_records
from loadgen.runner import LevelBounds, LevelContext
from loadgen.types import LevelSummary, RequestRecord
from loadgen.workload import Workload, parse_length_spec
from tests.bench.test_cli import BENCH, only_run_dir, sweep_args
from tests.e2e.levels import run_one_level
from tests.servers import ScriptedServer, is_running

TTFT_MS, ITL_MS, TOKENS = 100.0, 20.0, 24


def split_level(server: ScriptedServer, tmp_path: Path, level: Level, bounds: LevelBounds, workers: int,
                output_tokens: int = TOKENS) -> tuple[LevelSummary, list[RequestRecord], SplitResult]:
    workload = Workload(input_tokens=parse_length_spec("32"), output_tokens=parse_length_spec(str(output_tokens)))
    path = tmp_path / f"{level.label}-split.jsonl"
    with JsonlWriter(path) as writer:
        ctx = LevelContext("test", "scripted", level, ClientOptions(server.base_url, "scripted"), writer)
        result = run_split_level(ctx, bounds, iter_requests(workload),
                                 iter_requests(workload.model_copy(update={"seed": 99})),
                                 ClientPool(workers, log_path=tmp_path / "workers.log"))
    records = read_records(path)
    columns = columns_of(records)
    assert columns is not None
    return summarize_columns(columns, workers=result.level_run.workers), records, result


def test_shares_split_users_budget_and_warmup_evenly_with_unique_user_numbers() -> None:
    shares = split_shares(Level("concurrency", 7), LevelBounds(duration_s=1, max_requests=20), 3)
    assert [s.users for s in shares] == [3, 2, 2]
    assert [s.user_offset for s in shares] == [0, 3, 5]
    assert [s.max_requests for s in shares] == [7, 7, 6]
    assert [s.num_warmup for s in shares] == [3, 2, 2]
    assert len(split_shares(Level("concurrency", 2), LevelBounds(duration_s=1), 4)) == 2  # never an idle worker
    capped = split_shares(Level("rate", 10, max_concurrency=5), LevelBounds(duration_s=1), 2)
    assert [s.users for s in capped] == [3, 2] and [s.max_requests for s in capped] == [None, None]
    assert [s.users for s in split_shares(Level("rate", 10), LevelBounds(duration_s=1), 2)] == [0, 0]


@pytest.mark.serial
def test_two_workers_measure_what_one_process_does_at_256_users(scripted, tmp_path) -> None:
    level, bounds = Level("concurrency", 256), LevelBounds(duration_s=3.0)
    one, _, _ = run_one_level(scripted.base_url, tmp_path, level, bounds, output_tokens=TOKENS)
    two, records, result = split_level(scripted, tmp_path, level, bounds, workers=2)
    measured = [r for r in records if not r.is_warmup]
    assert two.requests.num_failed == 0 and two.client.num_workers == 2 and two.is_valid, two.invalid_reasons
    assert two.latency.ttft_ms.p50 == pytest.approx(one.latency.ttft_ms.p50, abs=3.0)
    assert two.latency.ttft_ms.p50 == pytest.approx(TTFT_MS, abs=5.0)
    assert two.latency.itl_ms.p50 == pytest.approx(one.latency.itl_ms.p50, rel=0.03)
    # the tail: three processes share two cores here, and run to run the p90 alone moved by half (20 against
    # 30 ms) with one process or two, so only a gross distortion is caught; the median above is held to 3 %
    assert two.latency.itl_ms.p99 == pytest.approx(one.latency.itl_ms.p99, rel=1.0)
    assert two.throughput.output_tokens_per_s == pytest.approx(one.throughput.output_tokens_per_s, rel=0.05)
    assert two.throughput.mean_in_flight == pytest.approx(256, rel=0.05)
    ids = [r.request_id for r in measured]
    assert len(ids) == len(set(ids)) == result.level_run.num_records  # every request once, all of them kept
    assert {r.worker for r in records} == {0, 1}
    assert {r.user for r in measured} == set(range(256))  # users numbered across the workers
    parts = result.level_run.workers
    assert [w.users for w in parts] == [128, 128] and sum(w.num_records for w in parts) == len(measured)
    assert all(abs(w.clock_offset_ms) <= w.clock_uncertainty_ms + 0.05 for w in parts)  # one machine, one clock
    assert all(w.clock_uncertainty_ms < 1.0 and w.start_s < 30 for w in parts)
    assert not {r.request_id for r in result.unsent} & set(ids)  # fed, never sent: given back, not lost


@pytest.mark.serial  # the schedule's lag is asserted
def test_a_poisson_schedule_is_dealt_across_workers_whole(scripted, tmp_path) -> None:
    """Together the workers send exactly the schedule one process would (same seed, same times); each
    sends its own part of it, not a copy."""
    scripted.set_script(ttft_ms=5, itl_ms=1)
    level = Level("rate", 80.0)
    s, records, _ = split_level(scripted, tmp_path, level, LevelBounds(duration_s=2.0), workers=2, output_tokens=4)
    measured = [r for r in records if not r.is_warmup]
    expected = []
    for t in arrival_offsets(level.value, level.burstiness, seed=int(level.value * 1000) + 17):
        if t > 2.0:
            break
        expected.append(t)
    sent = sorted(r.scheduled_s for r in measured)
    assert sent == pytest.approx(expected)
    by_worker = {w: sorted(r.scheduled_s for r in measured if r.worker == w) for w in (0, 1)}
    assert not set(by_worker[0]) & set(by_worker[1])
    assert abs(len(by_worker[0]) - len(by_worker[1])) <= 1  # dealt in turn
    gaps = np.diff(sent)
    assert gaps.mean() == pytest.approx(1 / level.value, rel=0.25)
    assert np.std(gaps) / gaps.mean() == pytest.approx(1.0, abs=0.3)  # exponential gaps: Poisson kept
    # p99 of 157 sends: another process's time slice on a shared two-core VM (11.8 ms seen once), so 20 ms
    assert s.latency.schedule_lag_ms.p99 is not None and s.latency.schedule_lag_ms.p99 < 20.0


def test_one_worker_falling_behind_invalidates_the_level_and_is_named(scripted, tmp_path) -> None:
    """The check is each worker's own: a worker whose loop lagged makes the level invalid even when the
    worst-of figures might hide which one; a clock known only loosely, or a worker at a low priority, is
    said in a note."""
    from dataclasses import replace

    s, records, result = split_level(scripted, tmp_path, Level("concurrency", 4), LevelBounds(max_requests=8), 2)
    assert s.is_valid and s.notes == []
    lagging = [replace(result.level_run.workers[0]),
               replace(result.level_run.workers[1], clock_uncertainty_ms=2.5, nice=15,
                       client=replace(result.level_run.workers[1].client, loop_lag_p99_ms=40.0))]
    columns = columns_of(records)
    assert columns is not None
    judged = summarize_columns(columns, workers=lagging)
    assert not judged.is_valid
    assert judged.invalid_reasons == ["client worker 1's event loop lagged 40.0 ms at p99"]
    assert judged.client is not None and judged.client.check.loop_lag_p99_ms == 40.0
    assert len(judged.notes) == 2 and "within 2.5 ms" in judged.notes[0]
    assert "1 client worker(s) ran at nice 15" in judged.notes[1] and "RAY_worker_niceness=0" in judged.notes[1]


def test_sweep_with_workers_records_them_and_goes_on_with_the_stream(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=2)
    result = subprocess.run([*BENCH, *sweep_args(scripted, tmp_path, "--concurrency", "4,6", "--requests", "12",
                                                 "--output-tokens", "8", "--workers", "2", "--no-report")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete" and run["client"]["workers"] == 2
    levels = [json.loads(line) for line in (run_dir / "levels.jsonl").read_text().splitlines()]
    assert [[w["users"] for w in level["workers"]] for level in levels] == [[2, 2], [3, 3]]
    records = read_records(run_dir / "requests.jsonl")
    measured = [r for r in records if not r.is_warmup]
    assert len(measured) == 24 and len({r.request_id for r in measured}) == 24  # no prompt sent twice
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [row["num_workers"] for row in summary] == [2, 2] and all(row["is_valid"] for row in summary)


def test_a_worker_killed_mid_level_fails_the_level_keeps_its_records_and_leaves_nothing(scripted, tmp_path) -> None:
    process, workers = _sweep_measuring_with_two_workers(scripted, tmp_path)
    try:
        os.kill(workers[1], signal.SIGKILL)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 2, stderr  # its one engine not measured: as when an engine dies
    said = f"client worker [01] \\(pid {workers[1]}\\) died mid-level \\(killed by SIGKILL\\)"
    assert re.search(said, " ".join(stderr.split())), stderr
    assert not any(is_running(pid) for pid in workers)
    run_dir = only_run_dir(tmp_path)
    run = json.loads((run_dir / "run.json").read_text())
    assert re.match("failed: WorkerFailed: " + said, run["status"]), run["status"]
    records = [r for r in read_records(run_dir / "requests.jsonl") if not r.is_warmup]
    assert len(records) >= 16 and {r.worker for r in records} == {0, 1}  # both workers' records kept
    assert not (run_dir / "levels.jsonl").read_text().strip()  # the level did not finish: resume runs it again
    (summary,) = json.loads((run_dir / "summary.json").read_text())  # as the sweep left it, and summarize too
    assert not summary["is_valid"] and "cut short" in summary["invalid_reasons"][-1] and summary["num_workers"] == 2


def test_a_sweep_with_workers_stopped_by_ctrl_c_keeps_its_records_and_stops_its_workers(scripted, tmp_path) -> None:
    process, workers = _sweep_measuring_with_two_workers(scripted, tmp_path)
    try:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    assert not any(is_running(pid) for pid in workers)
    run_dir = only_run_dir(tmp_path)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    records = [r for r in read_records(run_dir / "requests.jsonl") if not r.is_warmup]
    assert len(records) >= 16 and all(r.ok for r in records) and {r.worker for r in records} == {0, 1}


def _sweep_measuring_with_two_workers(scripted: ScriptedServer, out: Path) -> tuple[subprocess.Popen[str], list[int]]:
    """A 60 s sweep across two workers, once it has measured 16 requests; and the workers' pids."""
    scripted.set_script(ttft_ms=10, itl_ms=10)
    process = subprocess.Popen([*BENCH, *sweep_args(scripted, out, "--concurrency", "8", "--duration", "60",
                                                    "--output-tokens", "10", "--workers", "2", "--no-report")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        workers = _wait_for_children(process.pid, "loadgen.worker", count=2)
        wait_for_measured(out, at_least=16)
    except BaseException:
        process.kill()
        raise
    return process, workers


def _children(pid: int, marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and marker in cmdline:
            found.append(int(entry.name))
    return sorted(found)


def _wait_for_children(pid: int, marker: str, count: int, timeout_s: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(found := _children(pid, marker)) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{count} {marker} processes did not start")


def wait_for_measured(out: Path, at_least: int, timeout_s: float = 60) -> None:
    """Until a run under `out` has at least `at_least` measured records."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in out.glob("*/requests.jsonl"):
            if sum('"is_warmup":false' in line for line in path.read_text().splitlines()) >= at_least:
                return
        time.sleep(0.05)
    raise AssertionError("no measured records in time")


def test_ray_without_ray_installed_is_a_bad_flag_with_the_install_command(scripted, tmp_path) -> None:
    """What a user whose environment has no ray meets (ray made unimportable, whatever this one holds)."""
    without_ray = [sys.executable, "-c", "import sys; sys.modules['ray'] = None; sys.argv[0] = 'bench'; "
                   "from bench.commands.cli import app; app()"]
    result = subprocess.run([*without_ray, *sweep_args(scripted, tmp_path, "--requests", "1", "--ray", "auto")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "--ray auto: the ray package is not installed in this environment; pip install " \
           "'llm-selfhost-bench[ray]'" in " ".join(result.stderr.split())
