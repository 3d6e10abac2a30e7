"""Graded datasets end to end against the scripted server's quiz (each question answered right for a known
share, decided by its hash): every answer graded as it ends, the level's accuracy and its interval, answers that
worsen under load shown level by level, and the answers' text kept out of the run directory."""

from __future__ import annotations

import json
from pathlib import Path

from scripted.script import quiz_is_right
from tests.bench.test_cli import bench, only_run_dir, sweep_args


def write_quiz(path: Path, count: int) -> list[str]:
    questions = [f"Question {i}: what is the code word of item {i}?" for i in range(count)]
    path.write_text("".join(json.dumps({"prompt": f"{q} [[answer: word{i}]]", "answer": f"word{i}",
                                        "grader": "exact", "max_tokens": 1, "category": ("even", "odd")[i % 2]})
                            + "\n" for i, q in enumerate(questions)))
    return [f"{q} " for q in questions]


def test_a_graded_dataset_reports_the_share_the_server_answered_right(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=1, itl_ms=1, right_share=0.6)
    questions = write_quiz(tmp_path / "quiz.jsonl", 200)
    right = sum(quiz_is_right(q, 0.6) for q in questions)
    result = bench(*sweep_args(scripted, tmp_path / "runs", "--dataset", str(tmp_path / "quiz.jsonl"),
                               "--concurrency", "4", "--requests", "200"), timeout=120)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    assert f"| c4 | 200 | {right / 2:.1f}% |" in (run_dir / "report.md").read_text()
    (summary,) = json.loads((run_dir / "summary.json").read_text())
    quality = summary["quality"]
    assert quality["n"] == 200 and quality["accuracy"] == right / 200
    assert quality["low"] < 0.6 < quality["high"] and quality["high"] - quality["low"] < 0.15
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in rows if not r["is_warmup"]]
    assert all(r["correct"] is quiz_is_right(questions[r["dataset_index"] - 1], 0.6) for r in measured)
    assert all(r["output_text"] is None and r["category"] in ("even", "odd") for r in measured)
    assert "accuracy" in result.stdout


def test_answers_that_worsen_with_load_show_a_lower_accuracy_at_16_users_than_at_1(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=20, itl_ms=1, right_share=0.9, right_share_per_stream=0.08)
    write_quiz(tmp_path / "quiz.jsonl", 200)
    result = bench(*sweep_args(scripted, tmp_path / "runs", "--dataset", str(tmp_path / "quiz.jsonl"),
                               "--concurrency", "1,16", "--requests", "96", "--no-report"), timeout=120)
    assert result.returncode == 0, result.stderr
    one, sixteen = json.loads((only_run_dir(tmp_path / "runs") / "summary.json").read_text())
    print(f"\naccuracy at 1 user {one['quality']['accuracy']:.2f}, at 16 {sixteen['quality']['accuracy']:.2f}")
    assert one["quality"]["accuracy"] > 0.75 and sixteen["quality"]["accuracy"] < 0.5
    assert sixteen["quality"]["high"] < one["quality"]["low"]  # apart beyond their intervals
