"""Where the command line writes: tables and results to stdout, errors and warnings to stderr, and the one
way a command fails on bad input (one line, exit code 2)."""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

PIPED_WIDTH = 100  # piped text (CI logs, files) without COLUMNS: a little wider than rich's 80
PIPED_TABLE_WIDTH = 200  # piped tables without COLUMNS: their own width up to this, never cut or folded


def output_width() -> int | None:
    """COLUMNS where it is set, else a terminal's own width (None: rich asks it), else PIPED_WIDTH."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if sys.stdout.isatty() else PIPED_WIDTH


class BenchConsole(Console):
    """Text wraps at the output's width; a table piped without COLUMNS is printed at its own width (a log
    does not wrap, and a measurement table cut to 100 columns loses its figures)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # rich's signature
        if len(objects) == 1 and isinstance(objects[0], Table) and self.piped_default:
            natural = Measurement.get(self, self.options.update(width=PIPED_TABLE_WIDTH), objects[0]).maximum
            width, self.width = self.width, max(self.width, natural)  # rich caps a print's width at the console's
            try:
                super().print(*objects, **kwargs)
            finally:
                self.width = width
            return
        super().print(*objects, **kwargs)

    @property
    def piped_default(self) -> bool:
        return output_width() == PIPED_WIDTH and not sys.stdout.isatty() and "COLUMNS" not in os.environ


console = BenchConsole(width=output_width())
errors = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `message` as one error line (brackets in it kept: no markup) and end the command."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True)
    raise typer.Exit(code)


def warn(message: str) -> None:
    errors.print(f"[yellow]warning:[/] {escape(message)}", highlight=False)
