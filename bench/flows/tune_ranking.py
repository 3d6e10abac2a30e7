"""How each configuration of a tune is judged: its figures from its own run report (`report.json`): capacity
under the SLO and output tokens/s at the operating point, what that costs per 1M output tokens, time to
ready; the best by the objective, and the Pareto front of per-user speed against throughput per GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from bench.flows.tune_plan import TuneEntry
from bench.run.rundir import Run, RunDirError, read_run
from common.accuracy import Accuracy
from loadgen.metrics import MAX_OUTSIDE_CORES


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
    node: str | None = None  # the cluster node it ran on (bench tune --cluster)
    hardware: str | None = None  # what it was measured on: CPU, cores, GPUs and their driver


def config_result(tune_folder: Path, entry: TuneEntry) -> ConfigResult:
    """What the configuration's run measured, as its own report judged it."""
    base = ConfigResult(entry.config.name, entry.config.args, entry.status, entry.run_dir, node=entry.node)
    if entry.run_dir is None:
        return base
    run_dir = tune_folder / entry.run_dir
    report_path = run_dir / "report.json"
    try:
        run: Run | None = read_run(run_dir)
    except RunDirError:
        run = None
    base = replace(base, hardware=run.info.hardware.kind if run is not None and run.info.hardware else None)
    ready = run.info.engine.details.time_to_ready_s if run is not None else None
    busy = busy_note(run) if run is not None else None
    if not report_path.is_file():
        return replace(base, time_to_ready_s=ready, why_no_point="no report was written", busy=busy)
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
        else None, base.node, base.hardware)


def hardware_note(results: list[ConfigResult]) -> str | None:
    """A warning when the configurations measured were measured on different hardware: their figures then
    differ by the machine as well as by the configuration."""
    mixed = which_ran_on_what([(result.name, result.hardware) for result in results])
    return None if mixed is None else f"measured on different hardware, so ranked with care: {mixed}"


def which_ran_on_what(named: list[tuple[str, str | None]]) -> str | None:
    """`a, b on X; c on Y` for (name, hardware as `HostRecord.kind` gives it) pairs, where they ran on more than one
    kind of hardware (an unknown one left out); None where they all ran on the same."""
    by_hardware: dict[str, list[str]] = {}
    for name, hardware in named:
        if hardware is not None:
            by_hardware.setdefault(hardware, []).append(name)
    if len(by_hardware) < 2:
        return None
    return "; ".join(f"{', '.join(names)} on {hardware}" for hardware, names in by_hardware.items())


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
