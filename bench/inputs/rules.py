"""A published benchmark's rules that a scenario holds a run to (the shipped MLPerf presets), and where a run
departs from them.

A scenario's `rules` name the benchmark and what its results require: the least duration of a measured run, the
latency limits and the share of requests that must meet them, the arrival process, the dataset. A run whose
scenario (after its flags) departs from any of them says so on its first line and in its report, e.g. `not
comparable to MLPerf Inference (Llama-3.1-8B, Server): duration 60 s < 600 s`: the numbers may still be right,
but they are not the benchmark's. Only what a run's settings show is checked: the model and its accuracy against
the benchmark's reference are the team's to match.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Rules(BaseModel):
    """What a benchmark's results require of a run (checked against a `bench.inputs.scenario.Scenario`, which holds
    these rules: taken untyped here, so the two modules don't import each other)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    benchmark: str  # e.g. "MLPerf Inference (Llama-3.1-8B, Server)"
    short_name: str = "MLPerf"  # as the first line names it: "not comparable to MLPerf: ..."
    min_duration_s: float = Field(gt=0)
    ttft_ms: float = Field(gt=0)  # at `percentile`: with the attainment target, a request share that meets it
    tpot_ms: float = Field(gt=0)
    percentile: float = Field(default=99, gt=0, lt=100)
    arrivals: Literal["poisson", "any"] = "poisson"
    dataset: str | None = None  # the dataset the benchmark's queries come from, named for the reader


def departures(scenario: Any) -> list[str]:
    """Where the scenario's settings depart from its rules, each in a few words; none without rules."""
    rules = scenario.rules
    if rules is None:
        return []
    said = []
    load, slo = scenario.load, scenario.slo
    if load.duration_s is None or load.duration_s < rules.min_duration_s:
        ran = "ended by a request count" if load.duration_s is None else f"{load.duration_s:g} s"
        said.append(f"duration {ran} < {rules.min_duration_s:g} s")
    if slo.ttft_ms != rules.ttft_ms or slo.tpot_ms != rules.tpot_ms:
        said.append(f"SLO TTFT {_ms(slo.ttft_ms)}, TPOT {_ms(slo.tpot_ms)}, not {_ms(rules.ttft_ms)} and "
                    f"{_ms(rules.tpot_ms)}")
    target = scenario.pricing.slo_attainment_target
    if abs(target - rules.percentile / 100) > 1e-9:
        said.append(f"SLO judged at {target:.0%} of requests, not {rules.percentile:g} % (p{rules.percentile:g})")
    if rules.arrivals == "poisson":
        if load.concurrency:
            said.append("closed-loop users (--concurrency), not Poisson arrivals (--rate)")
        if load.burstiness != 1.0:
            said.append(f"burstiness {load.burstiness:g}, not 1 (Poisson)")
        if not load.rates and not load.concurrency:
            said.append("no arrival rate given (--rate)")
    if rules.dataset is not None and scenario.workload.dataset is None:
        said.append(f"synthetic prompts, not {rules.dataset}")
    return said


def first_line(scenario: Any) -> str | None:
    """The line a run under rules starts with: where it departs from them, or that it keeps them."""
    rules = scenario.rules
    if rules is None:
        return None
    said = departures(scenario)
    if said:
        return f"not comparable to {rules.short_name}: {'; '.join(said)} (the rules of {rules.benchmark})"
    return (f"held to {rules.benchmark}'s rules: {rules.min_duration_s:g} s at least, p{rules.percentile:g} TTFT <= "
            f"{_ms(rules.ttft_ms)} and TPOT <= {_ms(rules.tpot_ms)}"
            + (", Poisson arrivals" if rules.arrivals == "poisson" else "")
            + " (the model, and its accuracy against the benchmark's reference, are yours to match)")


def _ms(value: float | None) -> str:
    return "none" if value is None else f"{value:,.0f} ms"
