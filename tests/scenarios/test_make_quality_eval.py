"""The shipped eval: written by code (the file is what the generator writes, byte for byte), every answer
computed and accepted by its own grader, each line readable as a graded dataset line, and a mix of kinds."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from loadgen.quality.graders import grade
from loadgen.replay.formats import read_dataset
from scenarios.make_quality_eval import build_items, write_eval

SHIPPED = Path(__file__).parents[2] / "scenarios" / "data" / "quality.jsonl"


def test_the_shipped_file_is_what_the_generator_writes(tmp_path: Path) -> None:
    assert write_eval(tmp_path / "eval.jsonl") == 300
    assert (tmp_path / "eval.jsonl").read_bytes() == SHIPPED.read_bytes()


def test_every_answer_is_accepted_by_its_grader_and_a_near_miss_is_not() -> None:
    items = build_items()
    for item in items:
        accepted = [item["answer"]] if isinstance(item["answer"], str) else item["answer"]
        assert grade(item["grader"], accepted, item["answer"]), item
        wrong = {"number": str(int(item["answer"]) + 1) if item["grader"] == "number" else "",
                 "choice": "A" if item["answer"] != "A" else "B"}.get(item["grader"], "something else")
        assert not grade(item["grader"], accepted, wrong), item


def test_the_eval_reads_as_graded_lines_of_every_kind_with_no_question_twice() -> None:
    dataset = read_dataset(SHIPPED, None)
    graded = [c.grading for c in dataset.conversations]
    assert len(graded) == 300 and all(g is not None for g in graded)
    assert Counter(g.category for g in graded if g) == {"facts": 59, "words": 12, "arithmetic": 100, "units": 35,
                                                        "counting": 40, "ordering": 54}
    prompts = [c.turns[0].user for c in dataset.conversations]
    assert len(set(prompts)) == len(prompts)
    assert {g.grader for g in graded if g} == {"contains", "exact", "number", "choice"}
