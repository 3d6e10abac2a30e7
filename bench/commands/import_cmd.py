"""`bench import` and `bench export`: another tool's saved results as a run directory, and a run in another
tool's format (`bench.flows.importing`, `bench.flows.export`)."""

from __future__ import annotations

from pathlib import Path

import typer

from bench.commands.console import console, fail
from bench.commands.helptext import OUTPUT, examples

IMPORT_EXAMPLES = examples("bench import results/c8.json results/c32.json --from vllm",
                           "bench import benchmarks.json --from guidellm --engine vllm")
EXPORT_EXAMPLES = examples("bench export runs/RUN_DIR --format llmd-report",
                           "bench export runs/RUN_DIR --format csv --out sheets/")


def import_(
    files: list[Path] = typer.Argument(..., metavar="FILE",
                                       help="Result files: vLLM's `vllm bench serve --save-result` JSON (a "
                                            "level each), guidellm's benchmarks.json (a level per "
                                            "strategy), aiperf's profile_export_aiperf.json (a level each). "
                                            "Files at the same load are its repeats."),
    from_: str = typer.Option(..., "--from", metavar="TOOL",
                              help="The tool that wrote them: vllm, guidellm or aiperf."),
    engine: str = typer.Option(None, metavar="NAME",
                               help="The engine that served them (vllm, sglang, ...), where the files don't "
                                    "say it: they name the client's backend, not the server."),
    out: Path = typer.Option(Path("runs"), metavar="DIR", rich_help_panel=OUTPUT,
                             help="Directory that holds the run directories."),
) -> None:
    """Turn another tool's saved results into a run directory.

    bench report, compare and cost then read it like a measured one."""
    from bench.flows.importing import import_results
    from bench.imports import ImportFileError

    try:
        run_dir = import_results(files, from_, out, engine)
    except ImportFileError as exc:
        fail(str(exc))
    console.print(f"run directory: {run_dir}", highlight=False)


def export(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run directory written by `bench sweep`."),
    format: str = typer.Option(..., "--format", metavar="llmd-report|csv",
                               help="llmd-report (llm-d's Benchmark Report 0.1, one JSON file a level) or csv (one "
                                    "row a level, every figure)."),
    out: Path = typer.Option(None, metavar="DIR", rich_help_panel=OUTPUT,
                             help="Folder to write in (default: the run directory)."),
) -> None:
    """Write a run in another tool's format: llm-d's Benchmark Report, or CSV.

    A CSV has one row a level with every figure, for a spreadsheet."""
    from bench.flows.export import ExportError, export_run

    try:
        written = export_run(run_dir, format, out)
    except ExportError as exc:
        fail(str(exc))
    for path in written:
        console.print(str(path), highlight=False)

