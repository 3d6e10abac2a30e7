"""`bench quality` against scripted servers whose quiz answers a known share of questions right (decided per
question by its hash): the accuracy it reports is that share, its interval holds it, quality.json has it by
grader and category, and two servers are compared item by item; an earlier run serves as the reference
answer by answer, first tokens included where the server returns logprobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripted.script import quiz_is_right
from tests.bench.test_cli import bench
from tests.e2e.test_graded import write_quiz
from tests.servers import ScriptedServer, scripted_server


def engine_file(path: Path, server: ScriptedServer, name: str) -> Path:
    path.write_text(f"engine: endpoint\nname: {name}\nbase_url: {server.base_url}\nmodel: scripted\n")
    return path


def quality_of(out: Path, name: str) -> dict:
    (run_dir,) = [d for d in out.iterdir() if d.is_dir() and name in d.name]
    return json.loads((run_dir / "quality.json").read_text())


def test_the_accuracy_bench_quality_reports_is_the_share_answered_right_and_two_servers_compare_pairwise(
        scripted, tmp_path) -> None:
    questions = write_quiz(tmp_path / "quiz.jsonl", 120)
    scripted.set_script(ttft_ms=1, itl_ms=1, right_share=0.6)
    with scripted_server() as better:
        better.set_script(ttft_ms=1, itl_ms=1, right_share=0.8)
        result = bench("quality", "--eval", str(tmp_path / "quiz.jsonl"), "--out", str(tmp_path / "runs"),
                       "--engine-file", str(engine_file(tmp_path / "a.yaml", scripted, "sixty")),
                       "--engine-file", str(engine_file(tmp_path / "b.yaml", better, "eighty")),
                       "--concurrency", "4", timeout=120)
    assert result.returncode == 0, result.stderr
    right_a = [quiz_is_right(q, 0.6) for q in questions]
    right_b = [quiz_is_right(q, 0.8) for q in questions]
    a, b = quality_of(tmp_path / "runs", "sixty"), quality_of(tmp_path / "runs", "eighty")
    assert a["n"] == b["n"] == 120 and a["num_failed"] == 0
    assert a["accuracy"] == sum(right_a) / 120 and b["accuracy"] == sum(right_b) / 120
    assert a["low"] < 0.6 < a["high"] and b["low"] < 0.8 < b["high"]
    assert a["by_grader"]["exact"]["n"] == 120
    assert a["by_category"]["even"]["n"] == a["by_category"]["odd"]["n"] == 60
    assert a["by_category"]["even"]["accuracy"] == sum(right_a[0::2]) / 60
    assert a["eval"]["items"] == 120 and a["temperature"] == 0.0 and a["concurrency"] == 4
    assert a["paired"] is None  # the first engine is the baseline
    pair = b["paired"]
    only_a = sum(x and not y for x, y in zip(right_a, right_b, strict=True))
    only_b = sum(y and not x for x, y in zip(right_a, right_b, strict=True))
    assert (pair["only_baseline_right"], pair["only_other_right"]) == (only_a, only_b)
    assert pair["num_differ"] == only_a + only_b > 10 and pair["p_value"] < 0.001
    assert f"eighty gets {only_a + only_b} of 120 differently from sixty" in result.stdout
    # The answers are fingerprinted, never kept: equal answers where both were right (the accepted word) or both
    # wrong ("wrong").
    same = sum(x == y for x, y in zip(right_a, right_b, strict=True))
    assert b["agreement"]["num_identical"] == same and b["agreement"]["num_compared"] == 120


def test_an_earlier_run_is_the_reference_answer_by_answer_with_first_tokens_where_logprobs_come(
        scripted, tmp_path) -> None:
    questions = write_quiz(tmp_path / "quiz.jsonl", 60)
    scripted.set_script(ttft_ms=1, itl_ms=1, right_share=0.5)
    args = ["quality", "--eval", str(tmp_path / "quiz.jsonl"), "--engine", "endpoint", "--base-url",
            scripted.base_url, "--model", "scripted", "--logprobs"]
    first = bench(*args, "--out", str(tmp_path / "first"), timeout=120)
    assert first.returncode == 0, first.stderr
    (reference,) = [p for p in (tmp_path / "first").iterdir() if not p.name.startswith('.')]
    rows = [json.loads(line) for line in (reference / "requests.jsonl").read_text().splitlines()]
    assert all(r["answer_sha256"] and r["first_token_sha256"] and r["output_text"] is None for r in rows)
    scripted.set_script(ttft_ms=1, itl_ms=1, right_share=0.7)
    second = bench(*args, "--out", str(tmp_path / "second"), "--against", str(reference), timeout=120)
    assert second.returncode == 0, second.stderr
    (run_dir,) = [p for p in (tmp_path / "second").iterdir() if not p.name.startswith('.')]
    quality = json.loads((run_dir / "quality.json").read_text())
    same = sum(quiz_is_right(q, 0.5) == quiz_is_right(q, 0.7) for q in questions)
    agreement = quality["agreement"]
    assert agreement["num_compared"] == 60 and agreement["num_identical"] == same
    # The first token is the answer's first word: the accepted word or "wrong", as the answers themselves.
    assert agreement["num_first_token_compared"] == 60 and agreement["num_first_token_same"] == same
    assert quality["paired"]["num_differ"] == 60 - same
    assert f"answers {same} of 60 identically" in second.stdout


def test_a_reference_run_of_another_eval_is_refused_naming_it(scripted, tmp_path) -> None:
    write_quiz(tmp_path / "quiz.jsonl", 10)
    write_quiz(tmp_path / "other.jsonl", 12)
    scripted.set_script(ttft_ms=1, itl_ms=1, right_share=0.5)
    args = ["quality", "--engine", "endpoint", "--base-url", scripted.base_url, "--model", "scripted"]
    assert bench(*args, "--eval", str(tmp_path / "quiz.jsonl"), "--out", str(tmp_path / "a")).returncode == 0
    (reference,) = [p for p in (tmp_path / "a").iterdir() if not p.name.startswith('.')]
    refused = bench(*args, "--eval", str(tmp_path / "other.jsonl"), "--out", str(tmp_path / "b"),
                    "--against", str(reference))
    assert refused.returncode == 2
    assert "--against" in refused.stderr and "quiz.jsonl" in refused.stderr and "other.jsonl" in refused.stderr
    missing = bench(*args, "--eval", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "c"))
    assert missing.returncode == 2 and "--eval" in missing.stderr and "no such file" in missing.stderr


def test_the_report_puts_accuracy_beside_cost_and_a_floor_above_the_interval_keeps_self_hosting_from_winning(
        scripted, tmp_path) -> None:
    write_quiz(tmp_path / "quiz.jsonl", 100)
    scripted.set_script(ttft_ms=20, itl_ms=5, right_share=0.6)  # a client at ease: a valid level
    asked = bench("quality", "--eval", str(tmp_path / "quiz.jsonl"), "--engine", "endpoint", "--base-url",
                  scripted.base_url, "--model", "scripted", "--out", str(tmp_path / "runs"), timeout=120)
    assert asked.returncode == 0, asked.stderr
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith('.')]
    quality = json.loads((run_dir / "quality.json").read_text())
    report = bench("report", str(run_dir), "--gpu", "h100-sxm", "--min-accuracy", "0.9", "--out",
                   str(tmp_path / "report.html"))
    assert report.returncode == 0, report.stderr
    assert "no self-hosted option reaches the required accuracy of 90%" in report.stdout
    data = json.loads((tmp_path / "report.json").read_text())
    (engine,) = data["engines"]
    assert engine["accuracy"]["accuracy"] == quality["accuracy"] and engine["accuracy"]["n"] == 100
    assert engine["usd_per_correct_answer"] == engine["usd_per_request"] / quality["accuracy"]
    billed = engine["billed"]  # an endpoint bench did not launch: its answers as the compared provider bills them
    assert billed["provider"] == data["compared_to"]
    assert billed["usd_per_correct_answer"] == pytest.approx(billed["usd_per_request"] / quality["accuracy"])
    markdown = (tmp_path / "report.md").read_text()
    assert "## Accuracy beside cost" in markdown and "below: can't win" in markdown
    assert "Accuracy beside cost" in (tmp_path / "report.html").read_text()
