"""The results history: every finished sweep's levels in the runs folder's SQLite file, a trend per
configuration, and the newest run flagged when it lies outside the earlier runs' 95 % interval."""

from __future__ import annotations

import sqlite3

from bench.run.history import Point, judge
from tests.bench.test_cli import sweep_args


def points(*values: float | tuple[float, ...]) -> list[Point]:
    return [Point(f"r{i}", f"2026-12-0{i + 1}", sum(v) / len(v) if isinstance(v, tuple) else v,
                  v if isinstance(v, tuple) else (v,)) for i, v in enumerate(values)]


def test_the_newest_run_is_judged_against_the_earlier_runs_interval() -> None:
    assert judge(points(100.0, 102.0), True)[0].startswith("too few runs")
    verdict, (low, high) = judge(points(100.0, 102.0, 98.0, 101.0), True)
    assert verdict == "steady" and low < 101.0 < high
    assert judge(points(100.0, 102.0, 98.0, 80.0), True)[0] == "regression"  # throughput fell
    assert judge(points(100.0, 102.0, 98.0, 80.0), False)[0] == "improvement"  # a latency fell
    assert judge(points(100.0, 102.0, 98.0, 130.0), False)[0] == "regression"
    # with repeats: the newest's own interval must clear the earlier runs' mean's
    assert judge(points(100.0, 102.0, 98.0, (97.0, 99.0, 101.0)), True)[0] == "steady"
    assert judge(points(100.0, 102.0, 98.0, (90.0, 90.5, 91.0)), True)[0] == "regression"


def test_sweeps_fill_the_history_and_a_slower_server_is_flagged(scripted, tmp_path, cli) -> None:
    out = tmp_path / "runs"
    args = ("--concurrency", "2", "--requests", "12", "--output-tokens", "6", "--input-tokens", "8", "--no-report")
    for itl_ms in (10, 10, 10, 30):  # three alike, then the server three times slower per token
        scripted.set_script(ttft_ms=5, itl_ms=itl_ms)
        result = cli(*sweep_args(scripted, out, *args))  # in this process: no start-up each time
        assert result.exit_code == 0, result.output
    with sqlite3.connect(out / ".history" / "history.sqlite") as db:
        assert db.execute("SELECT COUNT(*), COUNT(DISTINCT config_key) FROM levels").fetchone() == (4, 1)
    said = cli("history", "--runs", str(out), "--level", "c2")
    assert said.exit_code == 1, said.output  # a regression fails the command, for a CI job to see
    assert "regression" in said.output and (out / ".history" / "history.html").is_file()
    latency = cli("history", "--runs", str(out), "--metric", "tpot_p50_ms")
    assert "regression" in latency.output
    nothing = cli("history", "--runs", str(out), "--engine", "vllm")
    assert nothing.exit_code == 2 and "no level of the history matching --engine vllm" in nothing.output
    with sqlite3.connect(out / ".history" / "history.sqlite") as db:  # as a busy machine leaves it
        db.execute("UPDATE levels SET is_valid = 0")
    invalid = " ".join(cli("history", "--runs", str(out)).output.split())
    assert "the history holds 4 level(s), none valid (each was judged invalid when measured" in invalid


def test_runs_made_before_the_history_are_imported_and_bad_asks_refused(scripted, tmp_path, cli) -> None:
    scripted.set_script(ttft_ms=5, itl_ms=5)
    made = cli(*sweep_args(scripted, tmp_path / "old", "--concurrency", "1", "--requests", "4", "--no-report"))
    assert made.exit_code == 0, made.output
    (run_dir,) = list((tmp_path / "old").glob("2*"))
    imported = cli("history", "--runs", str(tmp_path / "new"), "--import", str(run_dir))
    assert imported.exit_code == 0 and "1 levels of 1 run(s) added" in imported.output
    assert "too few runs" in imported.output
    assert "--metric speed: expected one of" in cli("history", "--runs", str(tmp_path / "new"), "--metric",
                                                    "speed").output
    assert "no history yet" in cli("history", "--runs", str(tmp_path / "none")).output
