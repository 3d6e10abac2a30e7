"""Measured levels as the cost model takes them: each carries its kind from the run's summary, never from
the first letter of its label, and a level's repeats folded into one keep it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.flows.costinputs import level_from_summary, measured_levels, repeated_level
from costmodel.model import slo_problems
from costmodel.types import LatencyLimits
from loadgen.types import Distribution, Latency, LevelSummary, RequestCounts, Throughput, Tokens


def summary(label: str, kind: str, target: float = 4.0, base_level: str = "") -> LevelSummary:
    return LevelSummary(
        engine="ref", level=label, kind=kind, target=target, base_level=base_level,
        requests=RequestCounts(num_requests=100, num_ok=100, num_failed=0, failure_rate=0.0, failures_by_kind={}),
        throughput=Throughput(window_s=10.0, is_steady_window=True, request_per_s=4.0, output_tokens_per_s=512.0,
                              total_tokens_per_s=1536.0, run_request_per_s=4.0, run_output_tokens_per_s=512.0,
                              goodput_request_per_s=4.0, slo_attainment=1.0, mean_in_flight=4.0),
        latency=Latency(ttft_ms=Distribution(), itl_ms=Distribution(), icl_ms=Distribution(), tpot_ms=Distribution(),
                        e2e_ms=Distribution()),
        tokens=Tokens(mean_input_tokens=256, mean_output_tokens=128))


@pytest.mark.parametrize(("label", "kind"), [("r4", "rate"), ("c4", "concurrency"), ("t1", "trace"),
                                             ("capacity", "rate"), ("r4", "concurrency")])
def test_a_level_s_kind_is_the_summary_s(label: str, kind: str) -> None:
    assert level_from_summary(summary(label, kind)).kind == kind


def test_repeats_folded_into_one_level_keep_its_kind_whatever_its_label() -> None:
    second = summary("r4#2", "rate", base_level="r4")
    repeats = [summary("r4", "rate", base_level="r4"),
               replace(second, throughput=replace(second.throughput, output_tokens_per_s=640.0))]
    capacity = repeated_level(repeats, "capacity")
    assert (capacity.label, capacity.kind, capacity.num_repeats) == ("capacity", "rate", 2)
    (level,) = measured_levels(repeats)
    assert (level.label, level.kind) == ("r4", "rate")


def test_a_summary_of_a_kind_the_cost_model_does_not_know_is_refused() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        level_from_summary(summary("c4", "closed"))


def test_an_invalid_level_says_why_in_the_cost_model_s_words() -> None:
    """A level cut short is not said to be one where the client fell behind; every other reason is the client's."""
    cut = replace(summary("c4", "concurrency"), is_valid=False,
                  invalid_reasons=["cut short before its end (the sweep was stopped, or a client worker died): ..."])
    behind = replace(summary("c8", "concurrency"), is_valid=False,
                     invalid_reasons=["client event loop lagged 36.2 ms at p99"])
    assert level_from_summary(cut).why_invalid == "it was cut short before its end"
    assert level_from_summary(behind).why_invalid == "the client fell behind"
    problems = slo_problems(level_from_summary(cut), LatencyLimits(), 0.95)
    assert problems[0] == "it was cut short before its end (level invalid)"
