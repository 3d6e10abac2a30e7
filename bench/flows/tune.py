"""`bench tune`: an engine's configurations as a sweep dimension.

A tune is a folder holding one run directory per configuration and `tune.json`, which lists the
configurations and the run each one has (written after every step, so a tune that was stopped goes on with
`--resume`: a configuration whose run is complete is not run again, an interrupted one resumes). The
configurations are the default (no engine argument changed), then the cartesian product of `--grid`s or the
rows of a `--configs` file. Each is judged from its own run report (`report.json`): capacity under the SLO
and output tokens/s at the operating point, what that costs per 1M output tokens, time to ready; the best
by the objective is marked, and the Pareto front of per-user speed against throughput per GPU is found.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.run.rundir import Run, RunDirError, read_run
from common.accuracy import Accuracy
from common.names import UnsafeNameError, inside
from common.validation import parse_yaml_mapping, read_text
from loadgen.metrics import MAX_OUTSIDE_CORES

TUNE_FILE = "tune.json"
OBJECTIVES = ("capacity", "cost", "throughput", "latency")
DEFAULT_NAME = "default"


class TuneError(ValueError):
    """A bad grid, configs file or tune folder; the message names the flag and what is accepted."""


@dataclass(frozen=True)
class TuneConfig:
    """One configuration: the engine arguments it changes from the engine's defaults (`model` included)."""

    name: str
    args: dict[str, str] = field(default_factory=dict)


def parse_grids(grids: list[str]) -> list[TuneConfig]:
    """`KEY=V1,V2` for each `--grid`: every combination, in the order given."""
    axes: list[tuple[str, list[str]]] = []
    for grid in grids:
        key, _, listed = grid.partition("=")
        values = [v.strip() for v in listed.split(",") if v.strip()]
        if not key.strip() or not values:
            raise TuneError(f"--grid {grid}: expected KEY=V1,V2,... (an engine argument and its values), e.g. "
                            "max-num-seqs=16,64,256")
        if key in (k for k, _ in axes):
            raise TuneError(f"--grid {grid}: {key} is given twice; list all its values in one --grid")
        axes.append((key.strip(), values))
    return [TuneConfig(_name(dict(zip([k for k, _ in axes], combo, strict=True))),
                       dict(zip([k for k, _ in axes], combo, strict=True)))
            for combo in itertools.product(*(values for _, values in axes))]


def read_configs(path: Path) -> list[TuneConfig]:
    """A YAML file: `configs:` a list of mappings of engine arguments (an optional `name` each)."""
    if not path.is_file():
        raise TuneError(f"--configs {path}: no such file")
    raw = parse_yaml_mapping(read_text(path, TuneError), str(path), TuneError, "a mapping with a `configs:` list")
    rows = raw.get("configs")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and r for r in rows):
        raise TuneError(f"{path}: expected `configs:` a non-empty list of mappings of engine arguments, e.g. "
                        "[{max-num-seqs: 64}, {max-num-seqs: 256, max-num-batched-tokens: 4096}]")
    configs = []
    for row in rows:
        args = {str(k): _text(v) for k, v in row.items() if k != "name"}
        configs.append(TuneConfig(str(row.get("name") or _name(args)), args))
    return configs


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _name(args: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in args.items()) or DEFAULT_NAME


def with_default(configs: list[TuneConfig]) -> list[TuneConfig]:
    """The default first (what an untuned engine gives), then each configuration once."""
    seen: dict[str, TuneConfig] = {DEFAULT_NAME: TuneConfig(DEFAULT_NAME)}
    for config in configs:
        if seen.setdefault(config.name, config).args != config.args:
            raise TuneError(f"configuration name '{config.name}' is given to two different configurations; name "
                            "each one once (`default` is the engine's own, with no argument changed)")
    return list(seen.values())


@dataclass
class TuneEntry:
    config: TuneConfig
    run_dir: str | None = None  # relative to the tune folder
    status: str = "pending"  # pending, complete, interrupted, failed: REASON


@dataclass
class Tune:
    folder: Path
    engine: str
    objective: str
    entries: list[TuneEntry]
    # The measuring flags every configuration shares (MeasureFlags' fields, and the levels), as given: a
    # resumed tune measures what is left exactly as it began.
    settings: dict[str, Any] = field(default_factory=dict)
    min_accuracy: float | None = None  # a configuration whose accuracy interval lies below it can't be the best
    created_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def save(self) -> None:
        data = {"engine": self.engine, "objective": self.objective, "created_at": self.created_at,
                "settings": self.settings, "min_accuracy": self.min_accuracy,
                "configs": [{**asdict(e.config), "run_dir": e.run_dir, "status": e.status} for e in self.entries]}
        temporary = self.folder / (TUNE_FILE + ".tmp")
        temporary.write_text(json.dumps(data, indent=2) + "\n")
        temporary.replace(self.folder / TUNE_FILE)  # never a half-written tune.json

    @classmethod
    def load(cls, folder: Path) -> Tune:
        path = folder / TUNE_FILE
        if not path.is_file():
            raise TuneError(f"--resume {folder}: no {TUNE_FILE} there (not a tune folder)")
        try:
            data = json.loads(path.read_text())
            entries = [TuneEntry(TuneConfig(c["name"], c["args"]), _run_dir_inside(folder, c.get("run_dir"), i),
                                 c.get("status", "pending")) for i, c in enumerate(data["configs"])]
            return cls(folder, data["engine"], data["objective"], entries, data.get("settings", {}),
                       data.get("min_accuracy"), data["created_at"])
        except UnsafeNameError as error:
            raise TuneError(f"--resume {folder}: {error}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as error:  # a file not written by bench tune
            raise TuneError(f"--resume {folder}: {TUNE_FILE} is not a tune record ({type(error).__name__}: "
                            f"{str(error)[:200]})") from None


def _run_dir_inside(folder: Path, run_dir: object, index: int) -> str | None:
    """A configuration's run directory, as tune.json names it: one folder inside the tune folder, or none."""
    if run_dir is None:
        return None
    inside(folder, str(run_dir), f"{TUNE_FILE} configs[{index}].run_dir")
    return str(run_dir)


def check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise TuneError(f"--objective {objective}: choose one of {', '.join(OBJECTIVES)}")
    return objective


@dataclass(frozen=True)
class ConfigResult:
    """A configuration's figures, from its run's report (None where the report does not give one)."""

    name: str
    args: dict[str, str]
    status: str
    run_dir: str | None
    capacity_load: float | None = None  # users (or requests/s) at the operating point
    output_tokens_per_s: float | None = None  # at the operating point
    usd_per_m_output_tokens: float | None = None  # one replica busy at the operating point
    time_to_ready_s: float | None = None
    ttft_p50_ms_lowest_load: float | None = None
    peak_output_tokens_per_s: float | None = None
    curve: tuple[tuple[float, float], ...] = ()  # per level: (1000 / TPOT p50, output tokens/s per GPU)
    why_no_point: str | None = None
    busy: str | None = None  # levels that shared the machine with other work, said as the level notes say it
    accuracy: Accuracy | None = None  # a graded workload (e.g. --scenario quality): its answers, all levels pooled


def config_result(tune_folder: Path, entry: TuneEntry) -> ConfigResult:
    """What the configuration's run measured, as its own report judged it."""
    base = ConfigResult(entry.config.name, entry.config.args, entry.status, entry.run_dir)
    if entry.run_dir is None:
        return base
    run_dir = tune_folder / entry.run_dir
    report_path = run_dir / "report.json"
    try:
        run: Run | None = read_run(run_dir)
    except RunDirError:
        run = None
    ready = run.info.engine.details.time_to_ready_s if run is not None else None
    busy = busy_note(run) if run is not None else None
    if not report_path.is_file():
        return ConfigResult(**{**asdict(base), "time_to_ready_s": ready, "why_no_point": "no report was written",
                               "busy": busy})
    report = json.loads(report_path.read_text())
    engine = report["engines"][0]  # one engine: the configuration's
    point = engine.get("operating_point") or {}
    per_hour = engine.get("replica_usd_per_hour")
    tokens = point.get("output_tokens_per_s")
    levels = engine.get("levels") or []
    gpus = report["inputs"]["assumptions"].get("gpus_per_replica") or 1
    # The view independent benchmarks use (as the run report's): the speed each user sees, 1000 / TPOT p50,
    # against output tokens/s per GPU.
    curve = tuple((1000 / lv["tpot_ms"]["p50"], lv["output_tokens_per_s"] / gpus)
                  for lv in levels if (lv.get("tpot_ms") or {}).get("p50") and lv.get("output_tokens_per_s"))
    first = min(levels, key=lambda lv: lv.get("load") or 0, default={})  # the lowest load, whatever the order
    return ConfigResult(
        entry.config.name, entry.config.args, entry.status, entry.run_dir, point.get("load"), tokens,
        per_hour / (tokens * 3600) * 1e6 if per_hour and tokens else None, ready,
        (first.get("ttft_ms") or {}).get("p50"), max((lv.get("output_tokens_per_s") or 0 for lv in levels),
                                                     default=None),
        curve, engine.get("no_operating_point_reason"), busy, Accuracy(**engine["accuracy"]) if engine.get("accuracy")
        else None)


def busy_note(run: Run) -> str | None:
    """The levels of a run that shared the machine with other work (past the level notes' threshold), and the
    most that went elsewhere: a configuration measured on a busy machine reads lower than it is."""
    machines = {s.level: s.client.machine for s in run.summaries if s.client.machine}
    taken = {label: max(machine.others_cores, machine.steal_cores) for label, machine in machines.items()}
    busy = {label: cores for label, cores in taken.items() if cores > MAX_OUTSIDE_CORES}
    if not busy:
        return None
    return (f"machine busy during {', '.join(busy)}: up to {max(busy.values()):.2f} of a core went to other work "
            "(see its report)")


def accuracy_note(result: ConfigResult, default: ConfigResult | None, min_accuracy: float | None = None) -> str | None:
    """A configuration that answers differently: its accuracy outside the default's 95 % interval, or its own
    interval below the floor (then it can't be the best)."""
    said = result.accuracy
    if said is None:
        return None
    notes = []
    if min_accuracy is not None and said.high < min_accuracy:
        notes.append(f"accuracy {said.accuracy:.0%} below the required {min_accuracy:.0%}: can't be the best")
    base = default.accuracy if default is not None and default is not result else None
    if base is not None and not base.low <= said.accuracy <= base.high:
        notes.append(f"accuracy {said.accuracy:.0%} outside the default's interval ({base.low * 100:.0f}-"
                     f"{base.high:.0%})")
    return "; ".join(notes) or None


def best(results: list[ConfigResult], objective: str, min_accuracy: float | None = None) -> ConfigResult | None:
    """The best configuration by the objective, among those the SLO let have an operating point (latency:
    the lowest TTFT at the lowest load, throughput: the highest output tokens/s of any level) and, with
    `min_accuracy`, whose accuracy interval does not lie below it."""
    def score(r: ConfigResult) -> tuple[float, float] | None:
        if objective == "capacity":  # ties broken by the throughput there
            return None if r.capacity_load is None else (r.capacity_load, r.output_tokens_per_s or 0.0)
        if objective == "cost":
            return None if r.usd_per_m_output_tokens is None else (-r.usd_per_m_output_tokens, 0.0)
        if objective == "throughput":
            return None if r.peak_output_tokens_per_s is None else (r.peak_output_tokens_per_s, 0.0)
        return None if r.ttft_p50_ms_lowest_load is None else (-r.ttft_p50_ms_lowest_load, 0.0)

    def accurate_enough(r: ConfigResult) -> bool:
        return min_accuracy is None or r.accuracy is None or r.accuracy.high >= min_accuracy

    scored = [(s, r) for r in results if accurate_enough(r) and (s := score(r)) is not None]
    return max(scored, key=lambda pair: pair[0])[1] if scored else None


def pareto_front(points: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """The points no other beats on both axes (higher is better on each): (label, x, y), sorted by x."""
    front = [p for p in points
             if not any(q[1] >= p[1] and q[2] >= p[2] and (q[1] > p[1] or q[2] > p[2]) for q in points)]
    return sorted(front, key=lambda p: p[1])


def objective_figure(result: ConfigResult, objective: str) -> float | None:
    """The figure the objective ranks by, as it reads (users, $/1M tokens, tokens/s or ms)."""
    return {"capacity": result.capacity_load, "cost": result.usd_per_m_output_tokens,
            "throughput": result.peak_output_tokens_per_s, "latency": result.ttft_p50_ms_lowest_load}[objective]
