"""Where the command line writes: tables and results to stdout, errors and warnings to stderr, and the one
way a command fails on bad input (one line, exit code 2)."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

PIPED_WIDTH = 100  # piped output (CI logs, files) without COLUMNS: a little wider than rich's 80


def output_width() -> int | None:
    """COLUMNS where it is set, else a terminal's own width (None: rich asks it), else PIPED_WIDTH."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if sys.stdout.isatty() else PIPED_WIDTH


console = Console(width=output_width())
errors = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `message` as one error line (brackets in it kept: no markup) and end the command."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True)
    raise typer.Exit(code)


def warn(message: str) -> None:
    errors.print(f"[yellow]warning:[/] {escape(message)}", highlight=False)
