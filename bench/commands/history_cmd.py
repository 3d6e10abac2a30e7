"""`bench history`: each configuration's trend from the runs folder's history, and whether the newest run
regressed (exit 1 then); `--import` adds older run directories to it first."""

from __future__ import annotations

from pathlib import Path

import typer

from bench.commands.console import console, fail
from bench.commands.helptext import examples

EXAMPLES = examples("bench history",
                    "bench history --engine vllm --level c32 --metric ttft_p95_ms",
                    "bench history --import runs/RUN_DIR")


def history(
    runs: Path = typer.Option(Path("runs"), metavar="DIR",
                              help="The runs folder whose history to read (.history/ in it)."),
    engine: str = typer.Option(None, metavar="NAME",
                               help="Only this engine (its name in run.json: reference, vllm, endpoint, ...)."),
    model: str = typer.Option(None, metavar="MODEL", help="Only this model (as the engine served it)."),
    level: str = typer.Option(None, metavar="LEVEL", help="Only this level, e.g. c32."),
    metric: str = typer.Option("output_tokens_per_s", metavar="METRIC",
                               help="output_tokens_per_s, request_per_s, ttft_p50_ms, ttft_p95_ms, tpot_p50_ms or "
                                    "e2e_p50_ms."),
    import_runs: list[Path] = typer.Option(None, "--import", metavar="RUN_DIR",
                                           help="Run directories made before the history existed, added to it "
                                                "(repeatable)."),
) -> None:
    """Each configuration's trend, run after run, and whether the newest one regressed.

    A regression is a newest run outside the 95 % interval of the earlier ones; writes history.html with the
    plots, and exits 1 on a regression."""
    from bench.commands.tables import history_table
    from bench.flows.history import write_history_page
    from bench.run import history as hist
    from bench.run.rundir import RunDirError, read_run

    if import_runs:
        added = 0
        for run_dir in import_runs:
            try:
                run = read_run(run_dir)
            except RunDirError as exc:
                fail(str(exc))
            if not run.summaries:
                fail(f"--import {run_dir}: no measured level in it")
            added += hist.record_run(run, runs)
        console.print(f"{added} levels of {len(import_runs)} run(s) added to {hist.history_path(runs)}", markup=False)
    try:
        trends = hist.trends(runs, metric, engine, model, level)
    except hist.HistoryError as exc:
        fail(str(exc))
    if not trends:
        fail("no run of the history matches --engine / --model / --level")
    console.print(history_table(trends))
    page = write_history_page(trends, metric, hist.history_path(runs).parent / "history.html")
    console.print(f"history: {page}", highlight=False, markup=False)
    if any(t.verdict == "regression" for t in trends):
        raise typer.Exit(1)

