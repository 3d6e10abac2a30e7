"""ScenarioOverrides over a scenario, built in Python or from the command line's flags: the same overrides give
the same scenario either way, none leave the scenario as it is, and a value the scenario refuses is named by its
place in the scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.inputs.measure_options import MeasureFlags
from bench.inputs.options import LoadOverrides, scenario_overrides
from bench.inputs.overrides import ScenarioOverrides, apply_overrides, build_scenario
from bench.inputs.scenario import ScenarioError, load_scenario, parse_scenario, shipped_scenarios
from loadgen.workload import SharedPrefix, parse_length_spec

DATA = Path(__file__).resolve().parents[2] / "scenarios" / "data"


@pytest.mark.parametrize("name", shipped_scenarios())
def test_no_overrides_leave_every_shipped_scenario_as_it_is(name: str) -> None:
    assert build_scenario(name) == load_scenario(name)
    assert build_scenario(name, scenario_overrides(MeasureFlags())) == load_scenario(name)


def test_overrides_built_in_python_give_the_scenario_the_flags_give() -> None:
    typed = ScenarioOverrides(concurrency=[1, 4], requests=8, input_tokens=parse_length_spec("uniform:10:30"),
                              shared_prefix=SharedPrefix(groups=2, tokens=64), turns=3, seed=7)
    flags = MeasureFlags(requests=8, input_tokens="uniform:10:30", shared_prefix="2:64", turns=3, seed=7)
    from_flags = scenario_overrides(flags, LoadOverrides(concurrency="1,4"))
    assert from_flags == typed.model_copy(update={"rates": None})  # the flags name no rates
    assert build_scenario("chat", typed) == build_scenario("chat", from_flags)
    scenario = build_scenario("chat", typed)
    assert (scenario.load.concurrency, scenario.load.rates, scenario.load.requests) == ([1, 4], [], 8)
    assert scenario.load.duration_s is None  # requests alone: exactly that many
    assert scenario.workload.multi_turn is not None and scenario.workload.multi_turn.turns == 3


def test_levels_of_one_kind_replace_both_kinds_of_the_scenarios() -> None:
    scenario = parse_scenario("name: s\nload: {concurrency: [2], rates: [1.5]}\n", "s.yaml")
    assert apply_overrides(scenario, ScenarioOverrides(rates=[3.0])).load.model_dump(
        include={"concurrency", "rates"}) == {"concurrency": [], "rates": [3.0]}
    assert apply_overrides(scenario, ScenarioOverrides()).load == scenario.load


def test_a_lora_override_adds_to_the_scenarios_adapters(tmp_path: Path) -> None:
    scenario = parse_scenario("name: s\nworkload:\n  adapters: {modules: {sql: adapters/sql}}\n", "s.yaml", tmp_path)
    adapters = apply_overrides(scenario, ScenarioOverrides(lora={"web": tmp_path / "web"},
                                                           adapter_counts=[0, 2])).workload.adapters
    assert adapters is not None and adapters.counts == [0, 2]
    assert adapters.modules == {"sql": str(tmp_path / "adapters" / "sql"), "web": str(tmp_path / "web")}


@pytest.mark.parametrize("overrides, expected", [
    (ScenarioOverrides(dataset=DATA / "prompts.jsonl", dataset_sample=0), "bad flag: workload.dataset.sample"),
    (ScenarioOverrides(on_throttle="sometimes"), "bad flag: load.on_throttle: Input should be 'fail' or 'retry'"),
    (ScenarioOverrides(shared_prefix=SharedPrefix.model_construct(groups=0, tokens=8)),
     "bad flag: workload.shared_prefix.groups"),
    (ScenarioOverrides(turns=3, rates=[2.0]), "runs with concurrency levels only"),
])
def test_a_value_the_scenario_refuses_is_named_by_its_place_in_it(overrides: ScenarioOverrides,
                                                                   expected: str) -> None:
    with pytest.raises(ScenarioError) as error:
        build_scenario("chat", overrides)
    assert expected in str(error.value)


@pytest.mark.parametrize("overrides, expected", [
    (ScenarioOverrides(turns=0), "--turns 0: expected a whole number >= 1"),
    (ScenarioOverrides(time_scale=2.0), "--time-scale need(s) --dataset FILE"),
    (ScenarioOverrides(agent=True), "agent sessions need a load"),
    (ScenarioOverrides(adapter_mix="zipf:1.1"), "--adapter-mix / --adapter-counts: name the adapters too"),
])
def test_a_combination_that_cant_be_names_the_flag(overrides: ScenarioOverrides, expected: str) -> None:
    with pytest.raises(ValueError) as error:
        build_scenario("chat", overrides)
    assert expected in str(error.value)
