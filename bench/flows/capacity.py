"""`bench capacity`: the highest load one replica carries within the SLO, found by probing, and its trail.

Every probe is a full level of the run (warm-up, steady window, the client's check on itself), chosen by
`bench.flows.search` from the probes before it and judged by the cost model's own rule (`bench.flows.costinputs`). With
`repeats`, the whole search runs again (its probes labelled `c8#2`, ...), and the capacity is given as the
mean of the repeats with its 95 % interval.

    capacity.json   {"kind", "slo", "attainment_target", "tolerance", "capacity", "capacity_interval",
                     "lowest_failing", "saturated", "stopped_because", "probes": [...], "repeats": [...]}

written after every probe, so an interrupted search leaves its trail.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.flows.costinputs import slo_margin, slo_problems_of
from bench.flows.search import CapacitySearch, Probe, SearchResult, SearchSettings
from loadgen.arrivals import Level, parse_label
from loadgen.repeats import interval
from loadgen.types import SLO, LevelSummary

CAPACITY_FILE = "capacity.json"
SLO_KEYS = {"ttft_p95_ms": "ttft_ms", "ttfvt_p95_ms": "ttfvt_ms", "tpot_p95_ms": "tpot_ms", "e2e_p95_ms": "e2e_ms",
            "session_p95_s": "session_s", "step_ttft_p95_ms": "step_ttft_ms"}


@dataclass(frozen=True)
class CapacityPlan:
    search: SearchSettings
    slo: SLO
    attainment_target: float = 0.95
    repeats: int = 1
    burstiness: float = 1.0  # open-loop probes only
    max_concurrency: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"search": asdict(self.search), "slo": self.slo.model_dump(), "attainment_target":
                self.attainment_target, "repeats": self.repeats, "burstiness": self.burstiness,
                "max_concurrency": self.max_concurrency}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> CapacityPlan:
        return cls(SearchSettings(**raw["search"]), SLO.model_validate(raw["slo"]), raw["attainment_target"],
                   raw["repeats"], raw["burstiness"], raw["max_concurrency"])


def parse_slo_flags(pairs: Sequence[str], base: SLO) -> SLO:
    """`["ttft_p95_ms=500", "tpot_p95_ms=40"]` over the scenario's SLO; an unknown key names the known ones."""
    values = base.model_dump()
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if key not in SLO_KEYS:
            raise ValueError(f"--slo {pair}: unknown target '{key}'; use {', '.join(SLO_KEYS)} (KEY=MILLISECONDS, "
                             "or KEY=SECONDS for a key ending in _s)")
        unit, example = ("SECONDS", 120) if key.endswith("_s") else ("MILLISECONDS", 500)
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"--slo {pair}: expected {key}={unit}, e.g. {key}={example}") from None
        if not sep or value <= 0:
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
        path = self.run_dir / CAPACITY_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(capacity_json(self.plan, self.results(), self.labels), indent=2) + "\n")
        tmp.replace(path)


def capacity_json(plan: CapacityPlan, results: list[SearchResult], labels: list[list[str]]) -> dict[str, Any]:
    repeats = [_repeat_json(r, i + 1, labels[i]) for i, r in enumerate(results)]
    found = [r.capacity for r in results if r.capacity is not None]
    failing = [r.lowest_failing for r in results if r.lowest_failing is not None]
    spread = interval(found) if found else None
    return {
        "kind": plan.search.kind, "slo": plan.slo.model_dump(), "attainment_target": plan.attainment_target,
        "tolerance": plan.search.tolerance,
        "capacity": spread.mean if spread and len(found) > 1 else (found[0] if found else None),
        "capacity_interval": asdict(spread) if spread else None,
        "lowest_failing": min(failing) if failing else None,
        "saturated": any(r.saturated for r in results),
        "stopped_because": [r.stopped_because for r in results],
        "probes": [probe for repeat in repeats for probe in repeat["probes"]],
        "repeats": repeats,
    }


def _repeat_json(result: SearchResult, repeat: int, labels: list[str]) -> dict[str, Any]:
    probes = [{"repeat": repeat, "label": label, "load": p.load, "passed": p.verdict == "pass",
               "verdict": p.verdict, "reasons": list(p.reasons), "output_tokens_per_s": p.output_tokens_per_s,
               "slo_margin": p.margin, "e2e_p50_ms": p.latency_ms}
              for label, p in zip(labels, result.probes, strict=False)]
    capacity_label = next((q["label"] for q in probes if q["load"] == result.capacity and q["passed"]), None)
    return {"repeat": repeat, "capacity": result.capacity, "capacity_label": capacity_label,
            "lowest_failing": result.lowest_failing, "saturated": result.saturated,
            "stopped_because": result.stopped_because, "num_probes": result.num_probes, "probes": probes}


def read_capacity(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / CAPACITY_FILE
    return json.loads(path.read_text()) if path.is_file() else None
