"""`bench summarize` and `bench compare`: run directories read (`read_run`) and their tables printed."""

from __future__ import annotations

from pathlib import Path

import typer

from bench.commands.console import console, fail
from bench.commands.helptext import examples

SUMMARIZE_EXAMPLES = examples("bench summarize runs/RUN_DIR",
                              "bench summarize runs/tune-FOLDER/RUN_DIR")
COMPARE_EXAMPLES = examples("bench compare runs/RUN_A runs/RUN_B",
                            "bench compare runs/*-reference-chat runs/*-vllm-chat")


def summarize(run_dir: Path = typer.Argument(..., metavar="RUN_DIR",
                                             help="A run directory written by `bench sweep`.")) -> None:
    """Recompute a run's summary from its records alone, and print it.

    With its capacity, if it searched; its repeats, sessions, grades and adapters, where it has them."""
    from bench.commands.display import show_runs
    from bench.run.rundir import RunDirError, read_run, write_summaries

    try:
        run = read_run(run_dir)
    except RunDirError as exc:
        fail(str(exc))
    if not run.summaries:
        fail(f"{run_dir}: no requests.jsonl; the sweep ended before any request finished")
    write_summaries(run_dir, list(run.summaries))
    show_runs([(run_dir, run)], title=str(run_dir))


def compare(run_dirs: list[Path] = typer.Argument(..., metavar="RUN_DIR",
                                                  help="Run directories to put side by side.")) -> None:
    """Put several runs side by side, level by level.

    Each level of each engine, with output tokens/s relative to the first run."""
    from bench.commands.tables import comparison_table
    from bench.run.rundir import RunDirError, read_run

    try:
        runs = [read_run(run_dir) for run_dir in run_dirs]
    except RunDirError as exc:
        fail(str(exc))
    console.print(comparison_table([(run.run_dir, run.info.source(), list(run.summaries)) for run in runs]))

