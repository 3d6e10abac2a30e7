"""A run as a CSV of every figure: one row per level."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from bench.run.rundir import Run


def write_csv(run: Run, path: Path) -> Path:
    """One row per level: the engine, its version and model, then every figure of the level's summary."""
    engine = run.info.engine
    rows = [{"run_id": run.info.run_id, "engine": engine.name, "engine_version": engine.version,
             "model": engine.model, **s.flat()} for s in run.summaries]
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=list(dict.fromkeys(key for row in rows for key in row)))
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(table.getvalue())
    return path
