"""`--resume`: a run killed in the middle of a level goes on where it was; and a sweep of several engines
in which one fails still measures and reports the others."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import yaml

from bench.flows.report import render_report
from tests.bench.test_cli import BENCH, bench, only_run_dir
from tests.bench.test_old_runs import SETTINGS
from tests.servers import ScriptedServer


def sweep_args(server: ScriptedServer, out: Path, *extra: str) -> list[str]:
    return ["sweep", "--engine", "endpoint", "--base-url", server.base_url, "--model", "scripted",
            "--concurrency", "2,4,8", "--duration", "2", "--output-tokens", "8", "--input-tokens", "16",
            "--no-report", "--out", str(out), *extra]


def levels_of(run_dir: Path) -> list[str]:
    return [json.loads(line)["level"] for line in (run_dir / "levels.jsonl").read_text().splitlines()]


def kill_during_level(server: ScriptedServer, out: Path, level: str, args: list[str] | None = None) -> Path:
    """Start a sweep (this module's, or `args`) and SIGKILL it once `level` has measured records but has not
    finished."""
    process = subprocess.Popen([*BENCH, *(args or sweep_args(server, out))], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            files = list(out.glob("*/requests.jsonl"))
            lines = files[0].read_text().splitlines() if files else []
            if any(f'"level":"{level}"' in line.replace(" ", "") and '"is_warmup":false' in line.replace(" ", "")
                   for line in lines):
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
    finally:
        process.kill()
    return only_run_dir(out)


def test_a_run_killed_mid_level_resumes_keeping_finished_levels_byte_for_byte(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=5)
    run_dir = kill_during_level(scripted, tmp_path / "runs", "c4")
    assert levels_of(run_dir) == ["c2"]
    before = (run_dir / "requests.jsonl").read_bytes()
    c2_lines = [line for line in before.splitlines(keepends=True) if b'"c2"' in line]
    assert any(b'"c4"' in line for line in before.splitlines())  # c4 was cut short with records on disk

    result = bench(*["sweep", "--resume", str(run_dir)], timeout=120)
    assert result.returncode == 0, result.stderr
    assert "1 level(s) kept; c4 cut short, run again" in result.stdout
    after = (run_dir / "requests.jsonl").read_bytes()
    assert after.startswith(b"".join(c2_lines))  # the finished level's records, untouched, still first
    assert levels_of(run_dir) == ["c2", "c4", "c8"]
    records = [json.loads(line) for line in after.splitlines()]
    for warmup in (False, True):  # no request sent twice: ids are unique within each stream
        ids = [r["request_id"] for r in records if r["is_warmup"] is warmup]
        assert len(ids) == len(set(ids))
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete" and len(run["resumed_at"]) == 1

    fresh = tmp_path / "fresh"
    assert bench(*sweep_args(scripted, fresh), timeout=120).returncode == 0
    resumed = {s["level"]: s for s in json.loads((run_dir / "summary.json").read_text())}
    again = {s["level"]: s for s in json.loads((only_run_dir(fresh) / "summary.json").read_text())}
    for level in ("c2", "c4", "c8"):
        ratio = resumed[level]["output_tokens_per_s"] / again[level]["output_tokens_per_s"]
        assert 0.85 < ratio < 1.15, (level, ratio)
        assert resumed[level]["num_failed"] == 0

    done = bench("sweep", "--resume", str(run_dir))
    assert done.returncode == 0 and f"{run_dir}: complete, nothing to resume" in done.stdout


def test_summarize_reads_a_killed_run_and_marks_its_cut_level(scripted, tmp_path) -> None:
    """One level finished, one cut by SIGKILL: every figure is recomputed, both files are written, and the cut
    level is not shown as a valid one."""
    scripted.set_script(ttft_ms=10, itl_ms=5)
    run_dir = kill_during_level(scripted, tmp_path / "runs", "c4")
    result = bench("summarize", str(run_dir))
    assert result.returncode == 0, result.stderr
    summaries = {s["level"]: s for s in json.loads((run_dir / "summary.json").read_text())}
    assert summaries["c2"]["is_valid"] and summaries["c2"]["invalid_reasons"] == []
    cut = summaries["c4"]
    assert not cut["is_valid"] and any("cut short" in reason for reason in cut["invalid_reasons"]), cut
    rows = (run_dir / "summary.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[2].startswith("endpoint,c4,")


def test_no_prompt_reaches_the_server_twice_across_a_kill_and_a_resume(scripted, tmp_path) -> None:
    """The server's own log of every prompt it got, warm-ups included: the attempt that was killed sent some
    (finished or in flight), and the resumed run sends none of them again."""
    scripted.set_script(ttft_ms=10, itl_ms=5)
    scripted.prompts()  # what earlier tests sent
    run_dir = kill_during_level(scripted, tmp_path / "runs", "c4")
    result = bench("sweep", "--resume", str(run_dir), timeout=120)
    assert result.returncode == 0, result.stderr
    prompts = scripted.prompts()
    assert len(prompts) > 24  # both attempts sent something
    repeated = [p for p, n in Counter(prompts).items() if n > 1]
    assert repeated == [], f"{len(repeated)} prompt(s) reached the server more than once"


def test_a_run_resumed_on_other_hardware_says_so_and_its_report_says_which_levels_ran_where(scripted, tmp_path) -> None:
    """The killed attempt's run.json made to describe another machine, as if the run began there: the resume warns,
    records the move with the levels measured before it, and the report names each level's machine."""
    scripted.set_script(ttft_ms=10, itl_ms=5)
    run_dir = kill_during_level(scripted, tmp_path / "runs", "c4")
    raw = json.loads((run_dir / "run.json").read_text())
    here = raw["hardware"]
    raw["hardware"] = {**here, "cpu_model": "Other CPU 9000", "cpus_usable": 96,
                       "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.6, "driver": "580.1"}]}
    (run_dir / "run.json").write_text(json.dumps(raw))

    result = bench("sweep", "--resume", str(run_dir), timeout=120)
    assert result.returncode == 0, result.stderr
    there = "Other CPU 9000 x96, 1x NVIDIA H100 80GB HBM3 (driver 580.1)"
    mine = f"{here['cpu_model']} x{here['cpus_usable']}"
    assert f"is resumed on other hardware, from {there} to {mine}" in " ".join(result.stdout.split())
    (move,) = json.loads((run_dir / "run.json").read_text())["resumed_elsewhere"]
    assert move["levels_before"] == ["c2"] and move["hardware"]["cpu_model"] == here["cpu_model"]
    assert move["resumed_at"] == json.loads((run_dir / "run.json").read_text())["resumed_at"][-1]

    again = bench("sweep", "--resume", str(run_dir))  # complete: nothing runs, nothing more is recorded
    assert again.returncode == 0 and "resumed on other hardware" not in again.stdout
    report = render_report([run_dir], tmp_path / "report.html", settings=SETTINGS)
    warnings = json.loads(report.files.json.read_text())["warnings"]
    assert any(f"its levels come from more than one machine: c2 on {there}; c4, c8 on {mine}" in w
               for w in warnings), warnings


def test_resume_refuses_what_it_cannot_go_on_with(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=5)
    run_dir = kill_during_level(scripted, tmp_path / "runs", "c2")
    cases = [
        (["sweep", "--resume", str(tmp_path)], "not a run directory (it has no run.json)"),
        (["sweep", "--resume", str(tmp_path / "nope")], "no such directory"),
        (["sweep", "--resume", str(run_dir), "--engine", "vllm"],
         "that run measured engine 'endpoint', not 'vllm'; drop --engine"),
        (["sweep", "--resume", str(run_dir), "--scenario", "other"],
         "that run measured scenario 'chat', not 'other'; drop --scenario"),
        (["sweep", "--resume", str(run_dir), "--duration", "5", "--concurrency", "1"],
         "drop --duration, --concurrency: a resumed run keeps the settings in its run.json"),
        (["capacity", "--resume", str(run_dir)], "that run is a sweep, not a capacity; resume it with `bench sweep"),
    ]
    for args, message in cases:
        result = bench(*args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)


def test_one_engine_failing_to_start_leaves_the_others_measured_reported_and_named(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=5)
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump({"engine": "endpoint", "base_url": scripted.base_url, "model": "scripted"}))
    bad.write_text(yaml.safe_dump({"engine": "reference", "model": "/no/such/model.gguf", "ready_timeout_s": 60}))
    out = tmp_path / "runs"
    result = bench("sweep", "--engine-file", str(bad), "--engine-file", str(good), "--concurrency", "1",
                   "--requests", "3", "--output-tokens", "8", "--out", str(out), timeout=180)
    assert result.returncode == 1
    assert "reference failed:" in result.stderr and "not measured: reference" in result.stderr
    assert "/no/such/model.gguf" in result.stderr
    assert "endpoint" in result.stdout and "c1" in result.stdout  # the engine that ran is in the summary
    measured = [d for d in out.iterdir() if d.name.endswith("-endpoint-chat")]
    assert len(measured) == 1 and (measured[0] / "report.html").is_file()
    failed = next(d for d in out.iterdir() if d.name.endswith("-reference-chat"))
    assert json.loads((failed / "run.json").read_text())["status"].startswith("failed: EngineStartError")
