"""The GPUs under load, as a report states them: power and utilization per level, energy per output token.

A block per engine when its GPUs were read (`telemetry.jsonl`, engines started here); otherwise a line
saying why not, since the energy and the owned-hardware costs then rest on the catalog's board power.
"""

from __future__ import annotations

from typing import Any

from loadgen.types import GpuView, LevelSummary
from reports.inputs import GpuReading

JOULES_PER_KWH = 3.6e6


def energy_block(summaries: tuple[LevelSummary, ...], views: tuple[GpuView, ...],
                 reading: GpuReading | None) -> dict[str, Any]:
    reading = reading or GpuReading()
    if not views:
        why = reading.why_not or "the run did not read its GPUs"
        return {"measured": False, "why_not": why, "levels": []}
    by_label = {s.level: s for s in summaries}
    levels = [_row(view, by_label[view.level]) for view in views if view.level in by_label]
    return {"measured": True, "reader": reading.reader, "names": sorted({n for v in views for n in v.names}),
            "num_gpus": max(v.num_gpus for v in views), "levels": levels}


def _row(view: GpuView, s: LevelSummary) -> dict[str, Any]:
    joules = view.joules_per_output_token(s.throughput.output_tokens_per_s)
    return {"label": s.level, "kind": s.kind, "load": s.target, "num_samples": view.num_samples,
            "mean_power_w": view.mean_power_w, "max_power_w": view.max_power_w,
            "mean_utilization_pct": view.mean_utilization_pct, "max_memory_used_mib": view.max_memory_used_mib,
            "mean_sm_clock_mhz": view.mean_sm_clock_mhz, "max_temperature_c": view.max_temperature_c,
            "output_tokens_per_s": s.throughput.output_tokens_per_s, "joules_per_output_token": joules,
            "output_tokens_per_kwh": JOULES_PER_KWH / joules if joules else None}
