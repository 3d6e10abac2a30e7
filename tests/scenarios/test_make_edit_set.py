"""The shipped `edit` workload: written by code (the file is what the generator writes, byte for byte), each
line a chat request whose document the answer is asked to repeat, and the scenario that replays it loads."""

from __future__ import annotations

import re
from pathlib import Path

from bench.inputs.scenario import load_scenario, shipped_scenarios
from loadgen.replay.formats import read_dataset
from scenarios.make_edit_set import NUM_LINES, entries

SHIPPED = Path(__file__).parents[2] / "scenarios" / "data" / "edit.jsonl"


def test_the_shipped_file_is_what_the_generator_writes(tmp_path: Path, monkeypatch) -> None:
    import scenarios.make_edit_set as make

    monkeypatch.setattr("sys.argv", ["make_edit_set", str(tmp_path / "edit.jsonl")])
    make.main()
    assert (tmp_path / "edit.jsonl").read_bytes() == SHIPPED.read_bytes()


def test_each_line_holds_a_fenced_document_and_one_small_change_of_every_kind() -> None:
    dataset = read_dataset(SHIPPED, None)
    assert len(dataset.conversations) == NUM_LINES == len(entries())
    languages = set()
    for conversation in dataset.conversations:
        (turn,) = conversation.turns
        fenced = re.search(r"```(\w+)\n(.+)```\Z", turn.user, re.DOTALL)
        assert fenced is not None, turn.user
        languages.add(fenced.group(1))
        assert len(fenced.group(2)) > 2 * len(turn.user[: fenced.start()])  # mostly document, little ask
    assert languages == {"python", "yaml", "text"}
    assert len({c.turns[0].user for c in dataset.conversations}) == NUM_LINES  # no request twice


def test_the_edit_scenario_replays_it_greedy() -> None:
    assert "edit" in shipped_scenarios()
    scenario = load_scenario("edit")
    assert scenario.workload.temperature == 0.0 and scenario.workload.dataset is not None
    assert Path(scenario.workload.dataset.path).resolve() == SHIPPED.resolve()
