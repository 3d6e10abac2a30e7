"""How `bench --help` and `bench CMD --help` read.

The command list is in panels in the order a user works (measure, decide, look at results, tools); a
command's options are in panels too, its own first, then the shared ones in `OPTION_PANELS` order; every
value names what it expects (`N,N,...`, `FILE`, `KEY=VALUE`, never typer's `<list[Path]>`); examples come
last. Typer renders help as rich markup, so help written here as plain text is escaped once, when a command
is built: `pip install 'llm-selfhost-bench[ray]'` would otherwise lose `[ray]` as a markup tag.

`BenchTyper` makes every command of an app a `BenchCommand` and the app a `BenchGroup`, so a command added
with a plain `app.command(...)` reads like the others.
"""

from __future__ import annotations

import enum
import inspect
import typing
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from bench.inputs.measure_options import ADVANCED, ENGINE, LOAD, OUTPUT, SLO, WORKLOAD

# `bench --help`'s command list as a user works through it. Typer lists a panel's commands in the order they
# were registered, and every subcommand group (lora) after every command, so the order is kept here.
COMMAND_PANELS: dict[str, tuple[str, ...]] = {
    "Measure": ("sweep", "capacity", "tune", "quality"),
    "Decide": ("report", "cost", "plan"),
    "Results": ("compare", "summarize", "import", "export", "history"),
    "Serve and tools": ("serve", "engines", "lora", "clean", "doctor"),
}

OPTION_PANELS = (ENGINE, WORKLOAD, LOAD, SLO, OUTPUT, ADVANCED)
CLUSTER = "Across a Ray cluster"  # a command's own panel: `--cluster` and what each job asks of a node

# The value an option takes, named from its type where its declaration names none.
TYPE_METAVARS: dict[Any, str] = {int: "N", float: "NUMBER", str: "TEXT", Path: "PATH"}


def examples(*lines: str) -> str:
    """A command's epilog: its example command lines, one a line (rich keeps the epilog's line breaks)."""
    return "\n".join(["Examples:", *lines])


class _Argument(TyperArgument):
    """An argument shown by its metavar alone: typer prints its Python type (`<list[Path]>`) beside it."""

    def display_type_rich(self, ctx: Any) -> str | None:  # typer's signature
        return None


class BenchCommand(TyperCommand):
    """A command whose help text is shown as written, its options in panels (its own first: the panel named
    after the command), each value named."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # typer's own, passed through
        super().__init__(*args, **kwargs)
        self.help, self.short_help = _literal(_paragraphs(self.help)), _literal(self.short_help)
        self.epilog = _literal(self.epilog)
        for param in self.params:
            param.help = _literal(getattr(param, "help", None))  # type: ignore[attr-defined]
            _name_value(param)
            if isinstance(param, TyperOption) and param.rich_help_panel is None:
                param.rich_help_panel = self.options_panel
        # Typer prints option panels in the order their first option comes: a stable sort keeps each panel's own.
        self.params.sort(key=self._panel_rank)

    @property
    def options_panel(self) -> str:
        return (self.name or "options").capitalize()

    def get_help_option(self, ctx: Any) -> TyperOption | None:  # click's signature
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
            option.rich_help_panel = self.options_panel
        return option

    def _panel_rank(self, param: Any) -> int:
        panel = getattr(param, "rich_help_panel", None)
        if panel in OPTION_PANELS:
            return 2 + OPTION_PANELS.index(panel)
        return 0 if panel in (None, self.options_panel) else 1  # a panel of the command's own after its first


class BenchGroup(TyperGroup):
    """The command list in `COMMAND_PANELS`' panels and order (typer shows panels in the order their first
    command comes); a command not listed there comes after them, in the panel it names. Its text is shown as
    written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # typer's own, passed through
        super().__init__(*args, **kwargs)
        self.help, self.short_help = _literal(_paragraphs(self.help)), _literal(self.short_help)
        self.epilog = _literal(self.epilog)
        for panel, names in COMMAND_PANELS.items():
            for name in names:
                if name in self.commands:
                    self.commands[name].rich_help_panel = panel  # type: ignore[attr-defined]

    def list_commands(self, ctx: Any) -> list[str]:  # click's signature
        order = [name for names in COMMAND_PANELS.values() for name in names]
        return sorted(super().list_commands(ctx), key=lambda name: order.index(name) if name in order else len(order))

    def get_help_option(self, ctx: Any) -> TyperOption | None:  # click's signature
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option


class BenchTyper(typer.Typer):
    """A typer app whose commands are `BenchCommand`s (unless a command names a class of its own) and whose
    group is a `BenchGroup`."""

    def __init__(self, **kwargs: Any) -> None:  # typer's own, passed through
        super().__init__(cls=kwargs.pop("cls", BenchGroup), **kwargs)

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None,
                **kwargs: Any) -> Any:  # typer's decorator
        return super().command(name, cls=cls or BenchCommand, **kwargs)


def _literal(text: str | None) -> str | None:
    return escape(text) if text else text


def _paragraphs(text: str | None) -> str | None:
    """A docstring's paragraphs, each on one line: rich keeps a line break typer leaves in, so a paragraph
    wrapped in the source would break mid-sentence on the screen (the epilog's lines are kept: examples)."""
    if not text:
        return text
    parts = inspect.cleandoc(text).split("\n\n")
    # A paragraph that starts with \b is click's "keep my line breaks".
    return "\n\n".join(part if part.startswith("\b") else " ".join(part.split()) for part in parts)


def _name_value(param: Any) -> None:
    """A value's metavar where its declaration gives none (a flag takes no value: none shown)."""
    if isinstance(param, TyperArgument):
        param.metavar = param.metavar or (param.name or "value").upper()
        param.__class__ = _Argument
    elif isinstance(param, TyperOption) and param.metavar is None:
        param.metavar = "" if param.is_flag else _type_metavar(param)


def _type_metavar(option: TyperOption) -> str:
    kind = option.type_descriptor.annotation
    if typing.get_origin(kind) is list:
        (kind,) = typing.get_args(kind)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return "|".join(str(member.value) for member in kind)
    return TYPE_METAVARS.get(kind, "VALUE")
