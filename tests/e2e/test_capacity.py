"""`bench capacity` against a server whose capacity under the SLO is known in closed form, and repeats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.test_cli import bench, only_run_dir
from tests.servers import ScriptedServer


def capacity(server: ScriptedServer, out: Path, *flags: str) -> tuple[dict, Path, str]:
    result = bench("capacity", "--engine", "endpoint", "--base-url", server.base_url, "--model", "scripted",
                   "--input-tokens", "16", "--output-tokens", "32", "--duration", "1.5", "--no-report",
                   "--out", str(out), *flags, timeout=300)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(out)
    return json.loads((run_dir / "capacity.json").read_text()), run_dir, result.stdout


@pytest.mark.serial  # the capacity found depends on the latencies measured: run alone
def test_a_decode_that_slows_per_stream_is_found_within_five_percent_in_ten_probes(scripted, tmp_path) -> None:
    """10 ms + 0.5 ms per other stream, p95 TPOT <= 40 ms: the true capacity is 61 users."""
    scripted.set_script(ttft_ms=20, itl_ms=10, itl_per_stream_ms=0.5)
    found, run_dir, stdout = capacity(scripted, tmp_path, "--slo", "tpot_p95_ms=40")
    assert found["kind"] == "concurrency" and found["slo"]["tpot_ms"] == 40
    assert abs(found["capacity"] - 61) / 61 <= 0.05
    assert len(found["probes"]) <= 10
    assert found["lowest_failing"] - found["capacity"] <= 0.05 * found["capacity"]
    assert [p["load"] for p in found["probes"][:7]] == [1, 2, 4, 8, 16, 32, 64]
    assert all(p["passed"] == (p["load"] <= found["capacity"]) for p in found["probes"])
    levels = [json.loads(line)["level"] for line in (run_dir / "levels.jsonl").read_text().splitlines()]
    assert levels == [p["label"] for p in found["probes"]]  # every probe is a full level of the run
    assert f"capacity: {found['capacity']:g} users" in stdout and "probe c64: fail" in stdout
    run = json.loads((run_dir / "run.json").read_text())
    assert run["plan"]["kind"] == "capacity" and run["scenario"]["slo"]["tpot_ms"] == 40 and run["levels"] == levels


@pytest.mark.serial  # the capacity found depends on the latencies measured: run alone
def test_a_server_that_caps_its_streams_at_24_has_a_capacity_of_24(scripted, tmp_path) -> None:
    """Past 24 streams a request waits, and p95 TTFT <= 110 ms (100 ms without a wait) fails any wait. Answers
    of different lengths keep the streams from ending in step, so past the cap nearly every request waits."""
    scripted.set_script(ttft_ms=100, itl_ms=10, max_streams=24)
    found, _, _ = capacity(scripted, tmp_path, "--slo", "ttft_p95_ms=110", "--output-tokens", "uniform:16:48")
    assert (found["capacity"], found["lowest_failing"]) == (24, 25)
    print(f"\nprobes on the wall: {[p['label'] for p in found['probes']]}")
    assert len(found["probes"]) <= 10  # bisected on the wall, not climbed one user at a time


@pytest.mark.serial  # the capacity found depends on the latencies measured: run alone
def test_repeated_searches_give_the_capacity_with_its_interval_and_the_report_a_range(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=20, itl_ms=10, itl_per_stream_ms=0.5)
    found, run_dir, stdout = capacity(scripted, tmp_path, "--slo", "tpot_p95_ms=40", "--repeats", "2",
                                      "--max-load", "8", "--report")
    assert [r["capacity"] for r in found["repeats"]] == [8, 8]
    assert found["capacity"] == 8 and found["capacity_interval"]["values"] == [8, 8]
    labels = [p["label"] for p in found["probes"]]
    assert labels == ["c1", "c2", "c4", "c8", "c1#2", "c2#2", "c4#2", "c8#2"]
    assert "capacity: 8 users, 95 % interval 8 to 8 (2 repeats: 8, 8; 8 probes)" in stdout
    repeats = json.loads((run_dir / "repeats.json").read_text())
    c8 = next(r for r in repeats if r["level"] == "c8")
    throughput = c8["figures"]["output_tokens_per_s"]
    assert len(throughput["values"]) == 2 and throughput["low"] <= throughput["mean"] <= throughput["high"]
    report = json.loads((run_dir / "report.json").read_text())
    point = report["engines"][0]["operating_point"]
    assert point["level"] == "capacity" and point["num_repeats"] == 2 and point["load"] == 8
    low, high = point["request_per_s_range"]
    assert low <= point["request_per_s"] <= high
    assert any("in 2 repeats (95 % interval)" in line for line in report["verdict"]["lines"])
    assert any(line.startswith("Over the throughput's 95 % interval") for line in report["verdict"]["lines"])


def test_a_sweep_with_repeats_runs_its_levels_in_rounds(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=2)
    result = bench("sweep", "--engine", "endpoint", "--base-url", scripted.base_url, "--model", "scripted",
                   "--concurrency", "1,2", "--requests", "4", "--output-tokens", "8", "--repeats", "3",
                   "--no-report", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    levels = [json.loads(line)["level"] for line in (run_dir / "levels.jsonl").read_text().splitlines()]
    assert levels == ["c1", "c2", "c1#2", "c2#2", "c1#3", "c2#3"]
    repeats = {r["level"]: r for r in json.loads((run_dir / "repeats.json").read_text())}
    assert set(repeats) == {"c1", "c2"} and repeats["c2"]["labels"] == ["c2", "c2#2", "c2#3"]
    summary = {row["level"]: row for row in json.loads((run_dir / "summary.json").read_text())}
    assert repeats["c2"]["figures"]["output_tokens_per_s"]["values"] == [
        summary[label]["output_tokens_per_s"] for label in ("c2", "c2#2", "c2#3")]
    assert "levels measured more than once" in result.stdout


def test_bad_capacity_flags_are_one_line_errors_naming_what_to_change(cli, tmp_path) -> None:
    base = ["capacity", "--engine", "endpoint", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
            "--out", str(tmp_path)]
    for flags, message in ((["--slo", "ttft_p99_ms=500"], "--slo ttft_p99_ms=500: unknown target 'ttft_p99_ms'; "
                                                           "use ttft_p95_ms, ttfvt_p95_ms, tpot_p95_ms, e2e_p95_ms"),
                           (["--slo", "tpot_p95_ms=fast"], "expected tpot_p95_ms=MILLISECONDS"),
                           (["--tolerance", "0"], "--tolerance 0: expected a share between 0 and 1"),
                           (["--tolerance", "1"], "--tolerance 1: expected a share between 0 and 1"),
                           (["--attainment", "1.5"], "--attainment 1.5: expected a share in (0, 1]")):
        result = cli(*base, *flags)
        assert result.exit_code == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
