"""The `bench ...` command lines a Markdown page shows, and a check of each against the real command line.

A line is found in a shell code block (no language, bash, sh, shell; a line continued with `\\` joined) or in
inline code that starts with `bench `. Output blocks (text, yaml, ...) are not commands and are left alone.
Checking parses the arguments as the command would (click's `make_context`; `bench serve`'s own argparse
parser), so a flag or command that does not exist is an error; nothing is run.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

SHELL_FENCES = {"", "bash", "sh", "shell"}
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
INLINE = re.compile(r"(?<!`)`(bench [^`]+)`(?!`)")
# A value that stands for what the reader types: RUN_DIR, N, <run-dir>, TASK[,TASK]
PLACEHOLDER = re.compile(r"^(<[^>]+>|[A-Z][A-Z0-9_]*(\[?,[A-Z][A-Z0-9_]*\]?)*)$")


@dataclass(frozen=True)
class CommandLine:
    """One `bench` invocation as a page shows it: where, and its arguments after `bench`."""

    where: str  # file:line
    args: tuple[str, ...]
    inline: bool = False  # a mention in prose may leave out what the command requires
    problem: str | None = None  # a shell line that is not one (an unclosed quote)


def command_lines(path: Path, root: Path) -> list[CommandLine]:
    """Every `bench` invocation on the page, from its shell blocks and its inline code."""
    found: list[CommandLine] = []
    name = path.relative_to(root).as_posix()
    for number, text, is_shell in _logical_lines(path.read_text(encoding="utf-8")):
        where = f"{name}:{number}"
        if is_shell and re.search(r"\bbench\b", text):
            try:
                found += [CommandLine(where, args) for args in _shell_invocations(text)]
            except ValueError as exc:
                found.append(CommandLine(where, (), problem=f"not a shell line ({exc}): {text}"))
        elif not is_shell:
            found += [CommandLine(where, _inline_args(span), inline=True) for span in INLINE.findall(text)]
    return found


def _logical_lines(page: str) -> list[tuple[int, str, bool]]:
    """(first line number, text, inside a shell block); prose lines as they are, other blocks' lines blanked,
    continued shell lines joined into one."""
    lines: list[tuple[int, str, bool]] = []
    fence: str | None = None  # the open block's fence, None in prose
    is_shell = False
    pending: tuple[int, str] | None = None  # a shell line continued with a backslash
    for number, line in enumerate(page.splitlines(), start=1):
        match = FENCE.match(line)
        if match and fence is None:
            fence, is_shell = match.group(1), match.group(2).lower() in SHELL_FENCES
        elif match and match.group(1).startswith(fence or ""):
            fence, is_shell = None, False
        elif fence is None or not is_shell:
            lines.append((number, line if fence is None else "", False))
        else:
            start, text = pending or (number, "")
            text += line.rstrip()
            pending = (start, text[:-1] + " ") if text.endswith("\\") else None
            if pending is None:
                lines.append((start, text, True))
    return lines


def _shell_invocations(text: str) -> list[tuple[str, ...]]:
    """Each `bench ...` of a shell line, split at `&&`, `|`, `;` and `&`, variable assignments before it skipped."""
    lexer = shlex.shlex(text.lstrip("$ "), posix=True, punctuation_chars="&|;")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    invocations, command = [], []
    for token in [*lexer, ";"]:
        if token.strip("&|;"):
            command.append(token)
            continue
        while command and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", command[0]):
            command.pop(0)
        if command and Path(command[0]).name == "bench":
            invocations.append(tuple(command[1:]))
        command = []
    return invocations


def _inline_args(span: str) -> tuple[str, ...]:
    """Inline code in prose: `[--flag N]` marks an optional part, `a|b` alternatives (the first is checked)."""
    tokens = [token.lstrip("[").rstrip("]") for token in shlex.split(span, comments=True)]
    return tuple(token.split("|")[0] if "|" in token and not token.startswith("-") else token
                 for token in tokens[1:] if token)


def check(line: CommandLine, app: typer.Typer) -> str | None:
    """None when the command exists and takes these arguments, else why not."""
    if line.problem:
        return line.problem
    command = typer.main.get_command(app)
    args = list(line.args)
    path = ["bench"]
    while hasattr(command, "commands") and args and not args[0].startswith("-"):  # a group: its subcommand
        if args[0] not in command.commands:
            return f"{' '.join(path)} has no command {args[0]!r}"
        path.append(args.pop(0))
        command = command.commands[path[-1]]
    if path == ["bench", "serve"]:
        return _check_serve(args)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # --help prints
            command.make_context(" ".join(path), _sample_values(args, _click_types(command)))
    except typer.Exit as done:  # --help: it exists
        return None if done.exit_code == 0 else f"exit {done.exit_code}"
    except typer.TyperException as exc:  # click's usage errors (typer carries its own click)
        if line.inline and type(exc).__name__ == "MissingParameter":
            return None
        return f"{' '.join(path)}: {exc.format_message()}"
    return None


def _check_serve(args: list[str]) -> str | None:
    """`bench serve` takes the reference engine's argparse flags and its own (replicas, router, UI)."""
    from bench.commands.serve_cmd import _add_stack_flags
    from engines.reference.serving.options import build_parser

    parser = build_parser("bench serve")
    _add_stack_flags(parser)
    types = {flag: _argparse_sample(action) for action in parser._actions for flag in action.option_strings}
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(_sample_values(args, types))
    except SystemExit as exc:
        return None if exc.code == 0 else stderr.getvalue().strip().splitlines()[-1]
    return None


def _click_types(command: Any) -> dict[str, str | None]:
    """Each option name -> a value its type accepts (None where any text is), or absent for a flag."""
    samples: dict[str, str | None] = {}
    for param in command.params:
        if param.param_type_name == "option" and not param.is_flag:
            for name in param.opts + param.secondary_opts:
                samples[name] = _typed_sample(getattr(param, "type_descriptor", None))
    return samples


def _typed_sample(descriptor: Any) -> str | None:
    """A value of the option's annotated type: typer keeps the annotation, not a click type, on its options."""
    kind = getattr(descriptor, "annotation", None)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return str(next(iter(kind)).value)
    return "1" if kind in (int, float) else None


def _argparse_sample(action: argparse.Action) -> str | None:
    if action.choices:
        return str(next(iter(action.choices)))
    return "1" if action.type in (int, float) else None


def _sample_values(args: list[str], samples: dict[str, str | None]) -> list[str]:
    """The arguments with a placeholder value (N, <file>) after a typed option swapped for one its type takes."""
    out = list(args)
    for i, arg in enumerate(out[:-1]):
        sample = samples.get(arg)
        if sample is not None and PLACEHOLDER.match(out[i + 1]):
            out[i + 1] = sample
    return out
