"""The options the measuring commands take (`bench sweep`, `bench capacity`, `bench tune`, `bench quality`) as
typer sees them. Each is declared once, as a field of `MeasureFlags` (bench.inputs.measure_options) with its
default, help, help panel and the name of its value; `measure_command` gives a command the ones it uses, and
hands them to it as one `MeasureFlags`. A shared flag a command sets itself (or has no use for) is left out of
its help and refused with the reason when given, never taken and then overwritten without a word."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, Concatenate

import typer

from bench.commands.console import fail
from bench.inputs.flag_text import flag_name
from bench.inputs.measure_options import MeasureFlags

__all__ = ["MeasureFlags", "measure_command"]  # MeasureFlags is declared below the commands, read by flows


def measure_command(command: Callable[Concatenate[MeasureFlags, ...], None],
                    refuses: Mapping[str, str] | None = None) -> Callable[..., None]:
    """`command(flags: MeasureFlags, **its_own_options)` -> a typer command taking the shared options too.

    `refuses`: field name -> why the command takes no such flag; those are hidden from its help, and given,
    end the command (exit 2) with `--flag: why` before anything starts."""
    refuses = dict(refuses or {})
    unknown = set(refuses) - {f.name for f in fields(MeasureFlags)}
    assert not unknown, f"not measuring flags: {sorted(unknown)}"
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
           for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "flags"]
    types_of = typing.get_type_hints(MeasureFlags)
    shared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=types_of[f.name],
                                default=typer.Option(f.default, help=f.metadata["help"], metavar=f.metadata["metavar"],
                                                     rich_help_panel=f.metadata["panel"], hidden=f.name in refuses))
              for f in fields(MeasureFlags)]

    @functools.wraps(command)
    def run(**values: Any) -> None:
        flags = MeasureFlags(**{f.name: values.pop(f.name) for f in fields(MeasureFlags)})
        for name, why in refuses.items():
            if flag_name(name) in flags.given(every=True):
                as_given = flag_name(f"no_{name}") if getattr(flags, name) is False else flag_name(name)
                fail(f"{as_given}: {why}")
        command(flags, **values)

    run.__signature__ = inspect.Signature([*shared, *own])  # type: ignore[attr-defined]
    run.__annotations__ = {}
    return run

