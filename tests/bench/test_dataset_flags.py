"""--dataset and its flags over a scenario: what they set, which levels run, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.commands.flags import MeasureFlags
from bench.flows.sweep import plan_levels
from bench.inputs.options import LoadOverrides, scenario_overrides
from bench.inputs.overrides import build_scenario as build
from bench.inputs.scenario import Scenario, ScenarioError, load_scenario, parse_scenario, shipped_scenarios

DATA = Path(__file__).resolve().parents[2] / "scenarios" / "data"


def build_scenario(name: str, flags: MeasureFlags, levels: LoadOverrides | None = None) -> Scenario:
    """The scenario as a measuring command makes it from its flags."""
    return build(name, scenario_overrides(flags, levels))


def test_every_shipped_scenario_loads_and_the_trace_scenarios_file_is_found() -> None:
    assert {"chat", "trace"} <= set(shipped_scenarios())
    for name in shipped_scenarios():
        load_scenario(name)
    dataset = load_scenario("trace").workload.dataset
    assert dataset is not None and Path(dataset.path) == DATA / "trace.mooncake.jsonl"
    assert plan_levels(load_scenario("trace").load, trace_scale=1.0)[0].label == "t1"


def test_a_scenario_files_dataset_path_is_taken_from_the_files_directory(tmp_path) -> None:
    text = "name: mine\nworkload:\n  dataset: {path: data/my.jsonl}\n"
    scenario = parse_scenario(text, "mine.yaml", tmp_path)
    assert scenario.workload.dataset.path == str(tmp_path / "data" / "my.jsonl")


def test_a_trace_on_the_command_line_replaces_the_scenarios_levels_unless_levels_are_given() -> None:
    trace = MeasureFlags(dataset=DATA / "trace.azure.csv", time_scale=0.5)
    scenario = build_scenario("chat", trace)
    assert (scenario.load.concurrency, scenario.load.rates) == ([], [])
    assert [lv.label for lv in plan_levels(scenario.load, repeats=2, trace_scale=0.5)] == ["t0.5", "t0.5#2"]
    with_levels = build_scenario("chat", trace, LoadOverrides(concurrency="1,4"))
    assert with_levels.load.concurrency == [1, 4]
    prompts = build_scenario("chat", MeasureFlags(dataset=DATA / "prompts.jsonl"))
    assert prompts.load.concurrency == [1, 8, 32]  # not a trace: the scenario's levels run on its prompts


def test_dataset_flags_land_in_workload_dataset() -> None:
    flags = MeasureFlags(dataset=DATA / "conversations.sharegpt.json", dataset_sample=3, turns=4,
                         max_input_tokens=500, keep_text=True)
    workload = build_scenario("chat", flags).workload
    assert workload.dataset.model_dump(include={"path", "sample", "turns", "max_input_tokens"}) == {
        "path": str(DATA / "conversations.sharegpt.json"), "sample": 3, "turns": 4, "max_input_tokens": 500}
    assert workload.multi_turn is None and workload.keep_text
    assert build_scenario("chat", MeasureFlags(dataset=DATA / "prompts.jsonl", dataset_turns="all")
                          ).workload.dataset.turns == "all"
    window = build_scenario("chat", MeasureFlags(dataset=DATA / "trace.mooncake.jsonl", trace_window="5:20"))
    assert window.workload.dataset.window == (5.0, 20.0)


@pytest.mark.parametrize("flags, expected", [
    (MeasureFlags(time_scale=0.5), "--time-scale need(s) --dataset FILE"),
    (MeasureFlags(dataset_sample=3, trace_window="0:9"), "--dataset-sample, --trace-window need(s) --dataset"),
    (MeasureFlags(dataset=DATA / "prompts.jsonl", dataset_turns="some"), "--dataset-turns some: expected a whole"),
    (MeasureFlags(dataset=DATA / "trace.azure.csv", trace_window="9:3"), "--trace-window 9:3: expected 0 <= START"),
    (MeasureFlags(dataset=DATA / "trace.azure.csv", trace_window="soon"), "--trace-window soon: expected START:END"),
    (MeasureFlags(dataset=Path("/nowhere/trace.jsonl")), "--dataset /nowhere/trace.jsonl: no such file"),
    (MeasureFlags(dataset=DATA / "prompts.jsonl", dataset_format="csv"), "dataset.format"),
    (MeasureFlags(dataset=DATA / "prompts.jsonl", dataset_sample=0), "dataset.sample"),
])
def test_a_bad_dataset_flag_is_named(flags, expected) -> None:
    with pytest.raises((ValueError, ScenarioError)) as error:
        build_scenario("chat", flags)
    assert expected in str(error.value)


def test_conversations_replayed_turn_by_turn_refuse_an_arrival_rate() -> None:
    flags = MeasureFlags(dataset=DATA / "conversations.sharegpt.json", dataset_turns="all")
    with pytest.raises(ScenarioError, match="runs with concurrency levels only"):
        build_scenario("chat", flags, LoadOverrides(rate="2"))


def test_a_dataset_beside_synthetic_conversations_is_refused(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({"name": "s", "workload": {"dataset": {"path": str(DATA / "prompts.jsonl")},
                                                          "multi_turn": {"turns": 2}}}))
    with pytest.raises(ScenarioError, match="a dataset brings its own prompts"):
        load_scenario(str(path))


def test_the_report_states_a_synthetic_workload_by_its_lengths_and_a_replayed_one_by_its_dataset() -> None:
    from bench.flows.report import _workload_text
    from bench.run.runinfo import RunInfo
    from loadgen.types import DatasetInfo, Distribution

    chat = load_scenario("chat")
    assert _workload_text(RunInfo("r", scenario=chat)) == (
        "synthetic prompts, input lognormal(mean 256, std 128) in [16, 1024] tokens, output 128 tokens")
    mine = DatasetInfo(name="mine.jsonl", path="mine.jsonl", sha256="0" * 64, format="jsonl", num_requests=1,
                       num_entries=1, num_in_file=1, input_tokens=Distribution(), output_tokens=Distribution(),
                       lengths="estimated")
    assert _workload_text(RunInfo("r", scenario=chat, dataset=mine)) is None
