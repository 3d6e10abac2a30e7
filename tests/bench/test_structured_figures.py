"""Shaped answers measured: a sweep of the shipped `structured` and `tools` scenarios against the scripted server,
which answers a set share of shaped requests validly and breaks the rest in known ways. Each level's validity equals
what the server says it sent; no answer's text reaches the run directory unless --keep-text asks; the decision
keeps an option below requirements.min_validity from winning, and the report says why."""

from __future__ import annotations

import json
from pathlib import Path

from bench.run.rundir import read_run
from tests.bench.test_cli import bench, only_run_dir, sweep_args


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]


def test_a_levels_validity_equals_what_the_server_sent_and_no_answer_is_kept(scripted, tmp_path: Path) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=2, valid_share=0.75)
    result = bench(*sweep_args(scripted, tmp_path, "--scenario", "structured", "--concurrency", "2",
                               "--requests", "40", "--warmup", "0"), timeout=120)
    assert result.returncode == 0, result.stderr
    told = scripted.shapes()
    run_dir = only_run_dir(tmp_path)
    (summary,) = read_run(run_dir).summaries
    validity = summary.validity
    assert validity is not None and told == {"answered": 40, "valid": 30}
    assert validity.n == 40 and validity.valid == 0.75 and validity.low < 0.75 < validity.high
    assert sum(validity.faults.values()) == 10 and set(validity.faults) <= {"not_json", "schema"}
    rows = _rows(run_dir)
    assert all(row["output_text"] is None and row["output_tool_calls"] is None for row in rows)
    assert not any("xxxx" in line for line in (run_dir / "requests.jsonl").read_text().splitlines())
    assert {row["structure_valid"] for row in rows} == {True, False}
    assert "shaped answers" in result.stdout and "75.0%" in result.stdout
    report = (run_dir / "report.md").read_text()
    assert "## Shaped answers" in report
    assert "no self-hosted option reaches the required validity of 95% for its shaped answers" in report


def test_tool_calls_are_read_from_the_stream_and_judged(scripted, tmp_path: Path) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=2, valid_share=0.5)
    result = bench(*sweep_args(scripted, tmp_path, "--scenario", "tools", "--concurrency", "1", "--requests", "12",
                               "--warmup", "0", "--keep-text", "--no-report"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert scripted.shapes() == {"answered": 12, "valid": 6}
    run_dir = only_run_dir(tmp_path)
    (summary,) = read_run(run_dir).summaries
    assert summary.validity is not None and summary.validity.n == 12 and summary.validity.valid == 0.5
    assert set(summary.validity.faults) == {"unknown_tool", "tool_arguments"}
    rows = _rows(run_dir)
    valid = [row for row in rows if row["structure_valid"]]
    assert len(valid) == 6 and all(row["num_tool_calls"] == 1 and row["tool_call_valid"] for row in valid)
    assert all(row["output_tool_calls"][0]["name"] == "get_order_status" for row in valid)  # --keep-text keeps them
    assert all(row["output_tokens"] > 1 and row["finish_reason"] == "tool_calls" for row in valid)


def test_a_workload_without_a_shape_judges_nothing(scripted, tmp_path: Path) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=2)
    result = bench(*sweep_args(scripted, tmp_path, "--concurrency", "1", "--requests", "3", "--output-tokens", "8",
                               "--input-tokens", "16", "--no-report"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert read_run(only_run_dir(tmp_path)).summaries[0].validity is None
    assert scripted.shapes() == {"answered": 0, "valid": 0}
    assert "shaped answers" not in result.stdout
