"""Run one level of the real load generator against a real server, in-process, into a temp file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from loadgen.arrivals import Level
from loadgen.client import ClientOptions
from loadgen.datasets import iter_requests
from loadgen.metrics import summarize
from loadgen.recorder import JsonlWriter, read_records
from loadgen.runner import LevelBounds, LevelContext, LevelRun, run_level_blocking
from loadgen.types import SLO, LevelSummary, RequestRecord
from loadgen.workload import Workload, parse_length_spec


def run_one_level(
    base_url: str, tmp_path: Path, level: Level, bounds: LevelBounds, output_tokens: int = 24,
    slo: SLO | None = None, workload: Workload | None = None, **option_changes: object,
) -> tuple[LevelSummary, list[RequestRecord], LevelRun]:
    workload = workload or Workload(input_tokens=parse_length_spec("32"),
                                    output_tokens=parse_length_spec(str(output_tokens)))
    options = replace(ClientOptions(base_url, "scripted"), **option_changes)  # type: ignore[arg-type]
    path = tmp_path / f"{level.label}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with JsonlWriter(path) as writer:
        ctx = LevelContext("test", "scripted", level, options, writer)
        warmup = iter_requests(workload.model_copy(update={"seed": 99}))
        level_run = run_level_blocking(ctx, bounds, iter_requests(workload), warmup)
    records = read_records(path)
    return summarize(records, slo, level_run.client, level_run.network), records, level_run
