"""The options every measuring command takes (`bench sweep`, `bench capacity`, `bench tune`) as typer sees them.
Each is declared once, as a field of `MeasureFlags` (bench.inputs.measure_options) with its default, help,
help panel and the name of its value; `measure_command` gives a command all of them, and hands them to it as
one `MeasureFlags`."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import fields
from typing import Any, Concatenate

import typer

from bench.inputs.measure_options import MeasureFlags

__all__ = ["MeasureFlags", "measure_command"]  # MeasureFlags is declared below the commands, read by flows


def measure_command(command: Callable[Concatenate[MeasureFlags, ...], None]) -> Callable[..., None]:
    """`command(flags: MeasureFlags, **its_own_options)` -> a typer command taking every shared option too."""
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
           for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "flags"]
    types_of = typing.get_type_hints(MeasureFlags)
    shared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=types_of[f.name],
                                default=typer.Option(f.default, help=f.metadata["help"], metavar=f.metadata["metavar"],
                                                     rich_help_panel=f.metadata["panel"]))
              for f in fields(MeasureFlags)]

    @functools.wraps(command)
    def run(**values: Any) -> None:
        flags = MeasureFlags(**{f.name: values.pop(f.name) for f in fields(MeasureFlags)})
        command(flags, **values)

    run.__signature__ = inspect.Signature([*shared, *own])  # type: ignore[attr-defined]
    run.__annotations__ = {}
    return run

