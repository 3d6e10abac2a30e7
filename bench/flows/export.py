"""`bench export`: a run directory written in another tool's format, llm-d's Benchmark Report (one per level,
bench/exports/llmd_report.py) or a CSV of every figure (one row per level, bench/exports/levels_csv.py).

A measured run's levels are exported from its requests.jsonl; an imported run's (`bench import`) from the requests
its files hold, or else from the means and percentiles they gave.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.exports.levels_csv import write_csv
from bench.exports.llmd_report import llmd_report
from bench.run import rundir
from bench.run.rundir import Run
from loadgen.columns import columns_by_level
from loadgen.recorder import read_jsonl

FORMATS = ("llmd-report", "csv")


class ExportError(ValueError):
    """The run can't be exported as asked; the message says why and what would do."""


def export_run(run_dir: Path, fmt: str, out: Path | None = None) -> list[Path]:
    """Write `run_dir` in format `fmt` into `out` (default: the run directory); the files written."""
    if fmt not in FORMATS:
        raise ExportError(f"--format {fmt}: expected one of {', '.join(FORMATS)}")
    try:
        run = rundir.read_run(run_dir)
    except rundir.RunDirError as exc:
        raise ExportError(str(exc)) from None
    if not run.summaries:
        raise ExportError(f"{run_dir}: no measured request to export")
    out = out or run_dir
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        return [write_csv(run, out / "export.csv")]
    columns = columns_by_level(_request_rows(run))
    spans, samples = rundir.level_spans(run_dir), rundir.telemetry_samples(run_dir)
    written, skipped = [], []
    for summary in run.summaries:
        c = columns.get(summary.level)
        if summary.requests.num_ok == 0 or (c is None and summary.latency.ttft_ms.mean is None):
            skipped.append(summary.level)  # no TTFT to give: the format requires one
            continue
        report = llmd_report(run, summary, c, spans.get(summary.level), samples)
        path = out / f"benchmark-report-{summary.level.replace('#', '-r').replace('~', '-a')}.json"
        path.write_text(json.dumps(report.model_dump(mode="json", exclude_none=True), indent=2) + "\n")
        written.append(path)
    if not written:
        raise ExportError(f"{run_dir}: no level with a successful request's TTFT ({', '.join(skipped)}), which "
                          "an llm-d report requires; --format csv exports every figure there is")
    return written


def _request_rows(run: Run) -> list[dict[str, Any]]:
    """The run's requests as requests.jsonl's rows: the file a measured run wrote, or the requests an imported
    file holds (none where it gives aggregates only)."""
    if run.info.imported is None:
        return list(read_jsonl(run.run_dir / rundir.REQUESTS_FILE))
    from bench.imports import read_levels

    files = rundir.imported_files(run.run_dir, run.info)  # checked again: names inside imported/, sha256 as kept
    levels = read_levels(run.info.imported.tool, files, run.info.run_id, run.info.imported.engine)
    return [asdict(record) for level in levels for record in level.records]
