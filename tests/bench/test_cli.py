"""`bench sweep` and `bench summarize` as a user runs them: a real process against a real server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.servers import ScriptedServer

BENCH = [sys.executable, "-m", "bench"]


def bench(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def sweep_args(server: ScriptedServer, out: Path, *extra: str) -> list[str]:
    return ["sweep", "--engine", "endpoint", "--base-url", server.base_url, "--model", "scripted",
            "--out", str(out), *extra]


def only_run_dir(out: Path) -> Path:
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith('.')]
    return run_dir


def test_sweep_writes_a_complete_run_directory_and_summarize_recomputes_it(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=20, itl_ms=5)
    result = bench(*sweep_args(scripted, tmp_path, "--concurrency", "1,4", "--requests", "8",
                               "--output-tokens", "16", "--input-tokens", "uniform:10:30"))
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    assert {p.name for p in run_dir.iterdir()} >= {"run.json", "requests.jsonl", "summary.csv", "summary.json",
                                                    "levels.jsonl"}
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete" and run["levels"] == ["c1", "c4"]
    assert run["telemetry"]["sampled"] is False and "HTTP 404" in run["telemetry"]["why_not"]
    assert not (run_dir / "telemetry.jsonl").exists()
    assert run["scenario"]["workload"]["input_tokens"] == {"dist": "uniform", "value": None, "mean": None,
                                                          "std": None, "min": 10, "max": 30}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [row["level"] for row in summary] == ["c1", "c4"]
    assert all(row["num_ok"] == 8 for row in summary)
    before = (run_dir / "summary.csv").read_text()
    (run_dir / "summary.csv").unlink()
    again = bench("summarize", str(run_dir))
    assert again.returncode == 0, again.stderr
    assert (run_dir / "summary.csv").read_text() == before
    assert "c4" in again.stdout


def test_api_key_value_never_reaches_disk_or_output(scripted, tmp_path) -> None:
    secret = "sk-test-5c7e3d1f9a"
    result = bench(*sweep_args(scripted, tmp_path, "--api-key-env", "MY_PROVIDER_KEY", "--concurrency", "1",
                               "--requests", "2", "--output-tokens", "4"), env={"MY_PROVIDER_KEY": secret})
    assert result.returncode == 0, result.stderr
    assert secret not in result.stdout + result.stderr
    run_dir = only_run_dir(tmp_path)
    for path in (p for p in run_dir.rglob("*") if p.is_file()):
        assert secret not in path.read_text(errors="replace"), path.name
    assert json.loads((run_dir / "run.json").read_text())["endpoint"]["api_key_env"] == "MY_PROVIDER_KEY"


@pytest.mark.parametrize(("extra", "message"), [
    (["--concurrency", "0"], "--concurrency 0: expected comma-separated whole numbers >= 1"),
    (["--concurrency", "a,b"], "--concurrency a,b: expected comma-separated whole numbers >= 1"),
    (["--rate", "-2"], "--rate -2: expected comma-separated numbers > 0"),
    (["--input-tokens", "normal:10"], "bad length 'normal:10'"),
    (["--api-key-env", "SURELY_NOT_SET_ANYWHERE"], "SURELY_NOT_SET_ANYWHERE, but that environment variable is not set"),
    (["--engine", "warp-drive"], "unknown --engine 'warp-drive'; choose one of"),
    (["--scenario", "nope"], "--scenario nope: not a file, and not one of the shipped scenarios"),
    (["--workers", "0"], "--workers 0: expected a whole number >= 1"),
])
def test_bad_flags_get_one_line_naming_the_flag(scripted, tmp_path, extra: list[str], message: str) -> None:
    result = bench(*sweep_args(scripted, tmp_path, "--requests", "1", *extra))
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_unreachable_url_and_unlisted_model_are_reported_before_any_load(scripted, tmp_path) -> None:
    result = bench("sweep", "--engine", "endpoint", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                   "--out", str(tmp_path))
    assert result.returncode == 2 and "cannot reach --base-url http://127.0.0.1:9/v1" in result.stderr
    result = bench("sweep", "--engine", "endpoint", "--base-url", scripted.base_url, "--model", "llama-9000",
                   "--out", str(tmp_path))
    assert result.returncode == 2
    assert "--model 'llama-9000' is not served at" in result.stderr and "it serves: scripted" in result.stderr


@pytest.mark.parametrize(("text", "message"), [
    ("name: x\nworkload: {api: chat\n", "not valid YAML"),
    ("name: x\nload: {concurency: [1]}\n", "load.concurency: unknown field"),
    ("name: x\nworkload: {output_tokens: {dist: normal, mean: 5}}\n", "workload.output_tokens"),
    ("- just a list\n", "expected a mapping"),
])
def test_malformed_scenarios_name_the_file_and_field(scripted, tmp_path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = bench(*sweep_args(scripted, tmp_path / "runs", "--scenario", str(path)))
    assert result.returncode == 2
    assert str(path) in result.stderr and message in result.stderr


def _as_background_job() -> None:
    """What a non-interactive shell does to a job it starts with `&`: SIGINT and SIGQUIT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background-job"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_interrupted_sweep_keeps_every_record_already_written(scripted, tmp_path, sig: signal.Signals,
                                                              background: bool) -> None:
    """Each stop signal ends the sweep cleanly with exit 128 + its number, even when SIGINT was inherited
    ignored (a background job of a shell script)."""
    scripted.set_script(ttft_ms=10, itl_ms=10)
    process = subprocess.Popen([*BENCH, *sweep_args(scripted, tmp_path, "--concurrency", "4", "--duration", "60",
                                                    "--output-tokens", "10")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_as_background_job if background else None)
    try:
        records = _wait_for_records(tmp_path, at_least=12, timeout_s=20)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 128 + sig, stderr
    assert "interrupted" in stderr
    run_dir = only_run_dir(tmp_path)
    lines = (run_dir / "requests.jsonl").read_text().splitlines()
    assert len(lines) >= records and all(json.loads(line)["ok"] for line in lines)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    assert json.loads((run_dir / "summary.json").read_text())[0]["num_ok"] >= records - 4


def _wait_for_records(out: Path, at_least: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        files = list(out.glob("*/requests.jsonl"))
        if files:
            count = len(files[0].read_text().splitlines())
            if count >= at_least:
                return count
        time.sleep(0.1)
    raise AssertionError("the sweep wrote no records in time")


def test_engines_lists_every_kind_with_whether_it_can_run_here() -> None:
    result = bench("engines")
    assert result.returncode == 0, result.stderr
    for name in ("reference", "llamacpp", "endpoint"):
        assert name in result.stdout
    assert "torch" in result.stdout


def test_compare_puts_runs_side_by_side_with_ratios_to_the_first(scripted, tmp_path, cli) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=5)
    for _ in range(2):  # in this process: no start-up each
        made = cli(*sweep_args(scripted, tmp_path, "--concurrency", "1,2", "--requests", "4", "--output-tokens", "8",
                               "--no-report"))
        assert made.exit_code == 0, made.output
    run_dirs = sorted(p for p in tmp_path.iterdir() if not p.name.startswith("."))  # .history is no run
    result = cli("compare", *map(str, run_dirs))
    assert result.exit_code == 0, result.output
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in result.output.splitlines()
            if "endpoint" in line]
    speed = {(run_dir.name, row["level"]): row["output_tokens_per_s"] for run_dir in run_dirs
             for row in json.loads((run_dir / "summary.json").read_text())}
    # run, source, engine, level, ok/failed, out tok/s, x: level by level, each run's speed over the first run's
    assert [(row[0], row[1], row[3], row[6]) for row in rows] == [
        (run_dir.name, "measured here", level,
         f"{speed[run_dir.name, level] / speed[run_dirs[0].name, level]:.2f}")
        for level in ("c1", "c2") for run_dir in run_dirs]
    missing = cli("compare", str(tmp_path / "nope"))
    assert missing.exit_code == 2 and "no run.json" in missing.output



@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_bench_serve_stops_on_each_stop_signal_even_as_a_background_job(sig: signal.Signals) -> None:
    process = subprocess.Popen([*BENCH, "serve", "--model", "dummy:tiny", "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=_as_background_job)
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        assert "reference engine ready on http://127.0.0.1:" in ready, process.stderr.read() if process.stderr else ""
        base_url = ready.split(" on ")[1].strip()
        assert httpx.get(base_url + "/models").status_code == 200
        process.send_signal(sig)
        process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 128 + sig


def test_bench_serve_stopped_while_its_model_loads_exits_at_once() -> None:
    process = subprocess.Popen([*BENCH, "serve", "--model", "dummy:tiny", "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=_as_background_job)
    deadline = time.monotonic() + 30
    while "libtorch" not in Path(f"/proc/{process.pid}/maps").read_text() and time.monotonic() < deadline:
        time.sleep(0.01)  # loading torch: inside the command, before the server's own handlers are in place
    process.send_signal(signal.SIGTERM)
    try:
        stdout, _ = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 143 and "ready" not in stdout


def test_bench_serve_takes_exactly_the_servers_own_flags() -> None:
    """`bench serve` passes its flags to the server's own parser, so every ServerOptions field is a flag."""
    from dataclasses import fields

    from engines.reference.serving.options import ServerOptions

    result = bench("serve", "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: bench serve")
    for field in fields(ServerOptions):
        assert f"--{field.name.replace('_', '-')}" in result.stdout, field.name
    assert "bench serve's own flags" in result.stdout  # the stack around the engine, beside its flags
    for flag in ("--replicas", "--router-policy", "--ui", "--ui-port", "--ui-python", "--ui-data"):
        assert f"{flag} " in result.stdout, flag
    bad = bench("serve", "--max-num-seqs", "many")
    assert bad.returncode == 2 and "--max-num-seqs: invalid int value: 'many'" in bad.stderr


def test_a_level_that_runs_well_past_its_duration_finishing_requests_says_its_real_length(scripted, tmp_path) -> None:
    # 40 tokens at 50 ms each: a request takes 2 s, so a 1 s level waits about 2 s more for those in flight
    scripted.set_script(ttft_ms=10, itl_ms=50)
    result = bench(*sweep_args(scripted, tmp_path, "--concurrency", "2", "--duration", "1", "--output-tokens", "40",
                               "--no-report"))
    assert result.returncode == 0, result.stderr
    (summary,) = json.loads((only_run_dir(tmp_path) / "summary.json").read_text())
    (note,) = [n for n in summary["notes"] if n.startswith("ran ")]
    seconds = float(note.split()[1])
    assert seconds >= 1.9 and note.endswith("s finishing the requests in flight (rates are from its steady window)")
    assert ", not 1 s: " in note and "finishing" in result.stdout  # the table's note column (wrapped)


def test_a_level_within_a_tenth_of_its_duration_says_nothing_of_its_length() -> None:
    from loadgen.metrics import overrun_notes

    assert overrun_notes((10.9, 10.0)) == [] and overrun_notes((30.0, None)) == [] and overrun_notes(None) == []
    assert overrun_notes((130.0, 20.0)) == ["ran 130 s, not 20 s: 110 s finishing the requests in flight (rates are "
                                            "from its steady window)"]
