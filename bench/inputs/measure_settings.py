"""A measuring command's flags and levels as JSON and back: what a tune keeps in tune.json, and what a cluster's
node is given to measure with (bench.flows.tune_cluster, bench.flows.sweep_cluster)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bench.inputs.measure_options import MeasureFlags


def settings_of(flags: MeasureFlags, concurrency: str | None, rate: str | None) -> dict[str, Any]:
    """The flags every run is measured with (all but --resume and --out, kept apart) and the levels, in JSON."""
    values = {f.name: getattr(flags, f.name) for f in dataclasses.fields(flags) if f.name not in ("resume", "out")}
    as_text = {k: [str(p) for p in v] if isinstance(v, list) and v and isinstance(v[0], Path)
               else str(v) if isinstance(v, Path) else v for k, v in values.items()}
    return {"flags": as_text, "out": str(flags.out), "concurrency": concurrency, "rate": rate}


def settings_back(settings: dict[str, Any]) -> tuple[MeasureFlags, str | None, str | None]:
    """`settings_of`' JSON back into the flags it was made from."""
    values = dict(settings.get("flags", {}))
    for name in ("tokenizer", "dataset", "adapters_dir"):
        values[name] = Path(values[name]) if values.get(name) else None
    values["engine_file"] = [Path(p) for p in values["engine_file"]] if values.get("engine_file") else None
    return (MeasureFlags(**values, out=Path(settings.get("out", "runs"))), settings.get("concurrency"),
            settings.get("rate"))
