"""What a capacity search records: its plan (in run.json) and its answer with every probe (capacity.json), as
frozen records read once. The search itself (bench.flows.capacity, bench.flows.search) writes them; a run
directory's reader (bench.run.rundir, bench.run.runinfo) reads them without knowing how they were found.

    capacity.json   {"kind", "slo", "attainment_target", "tolerance", "capacity", "capacity_interval",
                     "lowest_failing", "saturated", "stopped_because", "probes": [...], "repeats": [...]}
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from loadgen.types import SLO, Interval

CAPACITY_FILE = "capacity.json"
RATE_STEP = 0.01  # requests/s: the finest an arrival-rate search goes


@dataclass(frozen=True)
class SearchSettings:
    kind: Literal["concurrency", "rate"] = "concurrency"
    start: float = 1.0
    factor: float = 2.0
    tolerance: float = 0.05  # the gap at which it stops, as a share of the highest passing load
    max_load: float | None = None
    max_probes: int = 20
    saturation_gain: float = 0.05  # a doubling that adds less throughput than this saturates

    def __post_init__(self) -> None:
        if not 0 < self.tolerance < 1:
            raise ValueError(f"--tolerance {self.tolerance:g}: expected a share between 0 and 1, e.g. 0.05")
        if self.start <= 0 or (self.kind == "concurrency" and self.start != int(self.start)):
            raise ValueError(f"--start {self.start:g}: expected a load > 0 (a whole number of users)")
        if self.max_load is not None and self.max_load < self.start:
            raise ValueError(f"--max-load {self.max_load:g} is below --start {self.start:g}")
        if self.max_probes < 1 or self.factor <= 1:
            raise ValueError("--max-probes must be >= 1 (and the ramp factor > 1)")

    @property
    def min_step(self) -> float:
        return 1.0 if self.kind == "concurrency" else RATE_STEP


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


@dataclass(frozen=True)
class ProbeRecord:
    """One probe as capacity.json holds it; `slo_margin` the SLO's worst ratio of measured to allowed."""

    repeat: int
    label: str
    load: float
    passed: bool
    verdict: str  # pass, fail or invalid
    reasons: tuple[str, ...]
    output_tokens_per_s: float | None
    slo_margin: float | None
    e2e_p50_ms: float | None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "reasons": list(self.reasons)}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ProbeRecord:
        verdict = raw.get("verdict") or ("pass" if raw["passed"] else "fail")
        return cls(raw["repeat"], raw["label"], raw["load"], raw["passed"], verdict, tuple(raw.get("reasons", ())),
                   raw.get("output_tokens_per_s"), raw.get("slo_margin"), raw.get("e2e_p50_ms"))


@dataclass(frozen=True)
class RepeatRecord:
    """One whole search: its answer, why it stopped and its probes."""

    repeat: int
    capacity: float | None
    capacity_label: str | None  # the level at the capacity (None: none found)
    lowest_failing: float | None
    saturated: bool
    stopped_because: str
    num_probes: int
    probes: tuple[ProbeRecord, ...]

    def to_json(self) -> dict[str, Any]:
        return {**{name: getattr(self, name) for name in self.__dataclass_fields__},
                "probes": [probe.to_json() for probe in self.probes]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RepeatRecord:
        return cls(raw["repeat"], raw["capacity"], raw.get("capacity_label"), raw["lowest_failing"],
                   raw["saturated"], raw["stopped_because"], raw["num_probes"],
                   tuple(ProbeRecord.from_json(probe) for probe in raw["probes"]))


@dataclass(frozen=True)
class CapacityRecord:
    """capacity.json: the capacity found (the mean of the repeats, with its interval, when there are several)."""

    kind: str  # concurrency or rate
    slo: SLO
    attainment_target: float
    tolerance: float
    capacity: float | None
    capacity_interval: Interval | None
    lowest_failing: float | None
    saturated: bool
    stopped_because: tuple[str, ...]
    repeats: tuple[RepeatRecord, ...]

    @property
    def probes(self) -> tuple[ProbeRecord, ...]:
        return tuple(probe for repeat in self.repeats for probe in repeat.probes)

    @property
    def capacity_labels(self) -> list[str]:
        """The level at each repeat's capacity."""
        return [r.capacity_label for r in self.repeats if r.capacity_label]

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "slo": self.slo.model_dump(), "attainment_target": self.attainment_target,
            "tolerance": self.tolerance, "capacity": self.capacity,
            "capacity_interval": asdict(self.capacity_interval) if self.capacity_interval else None,
            "lowest_failing": self.lowest_failing, "saturated": self.saturated,
            "stopped_because": list(self.stopped_because), "probes": [p.to_json() for p in self.probes],
            "repeats": [r.to_json() for r in self.repeats],
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> CapacityRecord:
        spread = raw.get("capacity_interval")
        return cls(raw["kind"], SLO.model_validate(raw["slo"]), raw["attainment_target"], raw["tolerance"],
                   raw["capacity"], Interval(spread["mean"], spread["low"], spread["high"],
                                             tuple(spread.get("values", ()))) if spread else None,
                   raw["lowest_failing"], raw["saturated"], tuple(raw["stopped_because"]),
                   tuple(RepeatRecord.from_json(repeat) for repeat in raw["repeats"]))


def write_capacity(run_dir: Path, record: CapacityRecord) -> None:
    """capacity.json replaced whole (a reader never sees half of it)."""
    path = run_dir / CAPACITY_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record.to_json(), indent=2) + "\n")
    tmp.replace(path)


def read_capacity(run_dir: Path) -> CapacityRecord | None:
    path = run_dir / CAPACITY_FILE
    return CapacityRecord.from_json(json.loads(path.read_text())) if path.is_file() else None
