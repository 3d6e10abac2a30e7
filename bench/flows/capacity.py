"""`bench capacity`: the highest load one replica carries within the SLO, found by probing, and its trail.

Every probe is a full level of the run (warm-up, steady window, the client's check on itself), chosen by
`bench.flows.search` from the probes before it and judged by the cost model's own rule (`bench.flows.costinputs`). With
`repeats`, the whole search runs again (its probes labelled `c8#2`, ...), and the capacity is given as the
mean of the repeats with its 95 % interval.

capacity.json (bench.run.capacity_record.CapacityRecord) is written after every probe, so an interrupted
search leaves its trail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from bench.flows.costinputs import slo_margin, slo_problems_of
from bench.flows.search import CapacitySearch, Probe, SearchResult
from bench.inputs.flag_text import given_flags, key_value
from bench.inputs.scenario import Scenario
from bench.run.capacity_record import (
    CapacityPlan,
    CapacityRecord,
    ProbeRecord,
    RepeatRecord,
    SearchSettings,
    write_capacity,
)
from loadgen.arrivals import Level, parse_label
from loadgen.repeats import interval
from loadgen.types import SLO, LevelSummary

SLO_KEYS = {"ttft_p95_ms": "ttft_ms", "ttfvt_p95_ms": "ttfvt_ms", "tpot_p95_ms": "tpot_ms", "e2e_p95_ms": "e2e_ms",
            "session_p95_s": "session_s", "step_ttft_p95_ms": "step_ttft_ms"}


@dataclass(frozen=True)
class CapacityAsk:
    """What `bench capacity` is asked besides the measuring flags, each with its flag's default."""

    slo: list[str] | None = None  # KEY=VALUE targets over the scenario's SLO
    attainment: float | None = None  # default: the scenario's
    tolerance: float = 0.05
    start: float = 1.0
    rate: bool = False  # search the arrival rate, not the users
    max_load: float | None = None
    max_probes: int = 20
    burstiness: float | None = None
    max_concurrency: int | None = None

    def given(self) -> list[str]:
        """The flags given a value other than their default, as --names (a resumed search takes none)."""
        return given_flags({f.name: (getattr(self, f.name), f.default) for f in fields(self)})


def capacity_plan(ask: CapacityAsk, scenario: Scenario, repeats: int | None) -> CapacityPlan:
    """The search `ask` sets up over the scenario (its SLO, attainment target and open-loop shape where the
    flags don't say); a bad flag is a ValueError naming it."""
    target = ask.attainment if ask.attainment is not None else scenario.pricing.slo_attainment_target
    if not 0 < target <= 1:
        raise ValueError(f"--attainment {target:g}: expected a share in (0, 1], e.g. 0.95")
    search = SearchSettings("rate" if ask.rate else "concurrency", ask.start, tolerance=ask.tolerance,
                            max_load=ask.max_load, max_probes=ask.max_probes)
    return CapacityPlan(search, parse_slo_flags(ask.slo or [], scenario.slo), target, repeats or 1,
                        scenario.load.burstiness, scenario.load.max_concurrency)


def parse_slo_flags(pairs: Sequence[str], base: SLO) -> SLO:
    """`["ttft_p95_ms=500", "tpot_p95_ms=40"]` over the scenario's SLO; an unknown key names the known ones."""
    values = base.model_dump()
    for pair in pairs:
        key, text = key_value(pair)
        if key not in SLO_KEYS:
            raise ValueError(f"--slo {pair}: unknown target '{key}'; use {', '.join(SLO_KEYS)} (KEY=MILLISECONDS, "
                             "or KEY=SECONDS for a key ending in _s)")
        unit, example = ("SECONDS", 120) if key.endswith("_s") else ("MILLISECONDS", 500)
        try:
            value = float(text or "")
        except ValueError:
            raise ValueError(f"--slo {pair}: expected {key}={unit}, e.g. {key}={example}") from None
        if value <= 0:
            raise ValueError(f"--slo {pair}: expected {key}={unit} > 0, e.g. {key}={example}")
        values[SLO_KEYS[key]] = value
    return SLO.model_validate(values)


def judge(summary: LevelSummary | None, load: float, plan: CapacityPlan) -> Probe:
    """A finished probe: invalid when the client fell behind, else pass or fail by the cost model's rule."""
    if summary is None:
        return Probe(load, "fail", ("no request completed",))
    if not summary.is_valid:
        return Probe(load, "invalid", tuple(summary.invalid_reasons), summary.throughput.output_tokens_per_s)
    problems = slo_problems_of(summary, plan.slo, plan.attainment_target)
    return Probe(load, "fail" if problems else "pass", problems, summary.throughput.output_tokens_per_s,
                 slo_margin(summary, plan.slo, plan.attainment_target), summary.latency.e2e_ms.p50)


@dataclass
class CapacityDriver:
    """The levels of a capacity search, one repeat after another; `capacity.json` kept up to date."""

    plan: CapacityPlan
    run_dir: Path
    searches: list[CapacitySearch] = field(init=False)
    labels: list[list[str]] = field(init=False)  # per repeat, each probe's level label

    def __post_init__(self) -> None:
        self.searches = [CapacitySearch(self.plan.search) for _ in range(self.plan.repeats)]
        self.labels = [[] for _ in range(self.plan.repeats)]

    def next_level(self) -> Level | None:
        for repeat, search in enumerate(self.searches, start=1):
            load = search.next_load()
            if load is None:
                continue
            probes = search.probes
            attempt = 2 if probes and probes[-1].verdict == "invalid" and probes[-1].load == load else 1
            return Level(self.plan.search.kind, load, self.plan.burstiness, self.plan.max_concurrency,
                         repeat=repeat, attempt=attempt)
        self.write()
        return None

    def level_finished(self, level: Level, summary: LevelSummary | None) -> None:
        self.searches[level.repeat - 1].record(judge(summary, level.value, self.plan))
        self.labels[level.repeat - 1].append(level.label)
        self.write()

    def replay(self, finished: Sequence[tuple[str, LevelSummary | None]]) -> None:
        """The probes a resumed run already holds, in the order they ran."""
        for label, summary in finished:
            parsed = parse_label(label)
            self.searches[parsed.repeat - 1].record(judge(summary, parsed.target, self.plan))
            self.labels[parsed.repeat - 1].append(label)

    def results(self) -> list[SearchResult]:
        return [search.result() for search in self.searches if search.probes]

    def write(self) -> None:
        write_capacity(self.run_dir, capacity_record(self.plan, self.results(), self.labels))


def capacity_record(plan: CapacityPlan, results: list[SearchResult], labels: list[list[str]]) -> CapacityRecord:
    repeats = tuple(_repeat_record(r, i + 1, labels[i]) for i, r in enumerate(results))
    found = [r.capacity for r in results if r.capacity is not None]
    failing = [r.lowest_failing for r in results if r.lowest_failing is not None]
    spread = interval(found) if found else None
    return CapacityRecord(
        plan.search.kind, plan.slo, plan.attainment_target, plan.search.tolerance,
        capacity=spread.mean if spread and len(found) > 1 else (found[0] if found else None),
        capacity_interval=spread, lowest_failing=min(failing) if failing else None,
        saturated=any(r.saturated for r in results), stopped_because=tuple(r.stopped_because for r in results),
        repeats=repeats)


def _repeat_record(result: SearchResult, repeat: int, labels: list[str]) -> RepeatRecord:
    probes = tuple(ProbeRecord(repeat, label, p.load, p.verdict == "pass", p.verdict, tuple(p.reasons),
                               p.output_tokens_per_s, p.margin, p.latency_ms)
                   for label, p in zip(labels, result.probes, strict=False))
    capacity_label = next((q.label for q in probes if q.load == result.capacity and q.passed), None)
    return RepeatRecord(repeat, result.capacity, capacity_label, result.lowest_failing, result.saturated,
                        result.stopped_because, result.num_probes, probes)
