"""`bench quality --lm-eval`: the real lm-evaluation-harness (from $BENCH_LMEVAL, opt-in: `pytest -m lmeval`)
against the scripted server's quiz, through a task lm-eval defines over a local JSONL file (no hub): the
exact-match score it reports is the share the quiz answers right, read into quality.json. Without lm-eval, the
command says how to install it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scripted.script import quiz_is_right
from tests.bench.test_cli import bench
from tests.e2e.test_graded import write_quiz

TASK = """task: bench_quiz
dataset_path: json
dataset_kwargs:
  data_files:
    test: {path}
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 8
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
"""


@pytest.mark.lmeval
def test_lm_eval_scores_a_local_task_against_the_endpoint_as_the_quiz_answers_it(scripted, tmp_path: Path) -> None:
    if not os.environ.get("BENCH_LMEVAL"):
        pytest.fail("set BENCH_LMEVAL to lm-eval's environment (see README) to run the lmeval tests")
    questions = write_quiz(tmp_path / "quiz.jsonl", 40)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "quiz.yaml").write_text(TASK.format(path=tmp_path / "quiz.jsonl"))
    scripted.set_script(ttft_ms=1, itl_ms=1, right_share=0.6)
    result = bench("quality", "--lm-eval", "bench_quiz", "--lm-eval-include", str(tmp_path / "tasks"),
                   "--engine", "endpoint", "--base-url", scripted.base_url, "--model", "scripted",
                   "--concurrency", "2", "--out", str(tmp_path / "runs"), timeout=600)
    assert result.returncode == 0, result.stderr
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith('.')]
    quality = json.loads((run_dir / "quality.json").read_text())
    score = quality["lm_eval"]["scores"]["bench_quiz"]
    assert score["n"] == 40
    assert score["exact_match"] == pytest.approx(sum(quiz_is_right(q, 0.6) for q in questions) / 40)
    assert score["exact_match_stderr"] > 0
    assert quality["endpoint"]["base_url"] == scripted.base_url
    assert "bench_quiz" in result.stdout and (run_dir / "lm_eval.log").is_file()


def test_without_lm_eval_the_command_says_how_to_install_it(tmp_path: Path) -> None:
    env = {"BENCH_LMEVAL": str(tmp_path / "nowhere")}
    result = bench("quality", "--lm-eval", "bench_quiz", "--engine", "endpoint", "--base-url",
                   "http://127.0.0.1:9/v1", "--out", str(tmp_path / "runs"), env=env)
    assert result.returncode == 2
    assert f"$BENCH_LMEVAL={tmp_path / 'nowhere'}: no python there" in result.stderr
    assert "pip install" in result.stderr and "lm-eval" in result.stderr
