"""Where the command line writes: tables and results to stdout, errors and warnings to stderr, and the one
way a command fails on bad input (one line, exit code 2)."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

# Piped output (CI logs, files) gets wide tables instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 200)
errors = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `message` as one error line (brackets in it kept: no markup) and end the command."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True)
    raise typer.Exit(code)


def warn(message: str) -> None:
    errors.print(f"[yellow]warning:[/] {escape(message)}", highlight=False)
