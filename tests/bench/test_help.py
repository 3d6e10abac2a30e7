"""`bench --help` and every command's help: the commands in the order a user works, each command's options
in panels (its own first), every value named, text shown as written, and examples last that the real command
line parses. Rendered by the commands themselves at a fixed width, so no terminal changes what is checked."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import fields
from typing import Any
from unittest import mock

import pytest
import typer
from typer.core import TyperGroup
from typer.main import get_command

from bench.commands.cli import app
from bench.commands.flags import MeasureFlags
from bench.commands.helptext import OPTION_PANELS
from bench.commands.serve_cmd import _stack_flags
from engines.reference.serving.options import parse_args

COLUMNS = 100
PANEL = re.compile(r"^╭─ (.+?) ─+╮$")
# A row's first word (a command, an option), after typer's column of * for required options where a panel has
# one; a wrapped row's later lines start far to the right.
ROW_NAME = re.compile(r"^│ (?:[ *]  )?(\S+)")
TYPER_TYPES = re.compile(r"<(?:bool|int|float|str|path|text|list\[[^\]]*\]|[a-z]+ range)>")


def all_commands() -> list[tuple[str, ...]]:
    """Every command path under `bench`, groups included (() is `bench` itself)."""
    paths: list[tuple[str, ...]] = []

    def walk(command: Any, path: tuple[str, ...]) -> None:
        paths.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))

    walk(get_command(app), ())
    return paths


def command_at(path: tuple[str, ...]) -> Any:
    command = get_command(app)
    for name in path:
        command = command.commands[name]
    return command


def render(path: tuple[str, ...], columns: int = COLUMNS) -> tuple[str, Any]:
    """The help `bench PATH --help` prints, and the command object that printed it."""
    if path == ("serve",):  # argparse's help: typer hands it every argument (a run of its own, like the user's)
        result = subprocess.run([sys.executable, "-m", "bench", "serve", "--help"], capture_output=True, text=True,
                                timeout=60, env={**os.environ, "COLUMNS": str(columns)})
        assert result.returncode == 0, result.stderr
        return result.stdout, command_at(path)
    command, out = command_at(path), io.StringIO()
    with mock.patch.dict(os.environ, {"COLUMNS": str(columns)}), contextlib.redirect_stdout(out):
        with contextlib.suppress(SystemExit):
            command.main(["--help"], prog_name=" ".join(("bench", *path)))
    return out.getvalue(), command


def panels(text: str) -> list[tuple[str, list[str]]]:
    """Each panel's title and the first word of each of its rows, in the order shown."""
    found: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        title = PANEL.match(line)
        if title:
            found.append((title.group(1), []))
            continue
        row = ROW_NAME.match(line)
        if row and found:
            found[-1][1].append(row.group(1))
    return found


def examples_at_the_end(text: str) -> list[str]:
    """The command lines after the last `Examples:`, which must end the help."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert "Examples:" in lines, text
    start = len(lines) - lines[::-1].index("Examples:")
    return lines[start:]


def test_bench_help_lists_the_commands_in_workflow_panels() -> None:
    text, _ = render(())
    listed = [(title, rows) for title, rows in panels(text) if title != "Options"]
    assert listed == [("Measure", ["sweep", "capacity", "tune", "quality"]),
                      ("Decide", ["report", "cost", "plan"]),
                      ("Results", ["compare", "summarize", "import", "export", "history"]),
                      ("Serve and tools", ["serve", "engines", "lora", "clean", "doctor"])]


@pytest.mark.parametrize("path", [p for p in all_commands() if len(p) == 1])
def test_each_command_has_a_one_line_one_sentence_summary(path: tuple[str, ...]) -> None:
    summary = command_at(path).help.split("\n\n")[0]
    assert "\n" not in summary and summary.endswith(".") and summary.count(". ") == 0, summary
    text, _ = render(())
    assert any(line.startswith(f"│ {path[0]} ") and summary in line for line in text.splitlines()), (summary, text)


def test_sweep_help_groups_its_options_own_first_then_the_shared_panels() -> None:
    text, _ = render(("sweep",))
    shown = panels(text)
    assert [title for title, _ in shown] == ["Sweep", "Across a Ray cluster", "Engine", "Workload", "Load and bounds",
                                             "Output", "Advanced"]
    assert shown[0][1][0] == "--concurrency" and "--rate" in shown[0][1]
    assert dict(shown)["Across a Ray cluster"] == ["--cluster", "--gpus-per-engine", "--cpus-per-engine"]
    assert "--engine" in dict(shown)["Engine"] and "--dataset" in dict(shown)["Workload"]
    assert "--duration" in dict(shown)["Load and bounds"] and "--ray" in dict(shown)["Advanced"]


@pytest.mark.parametrize("path", [p for p in all_commands() if p and not isinstance(command_at(p), TyperGroup)
                                  and p != ("serve",)])
def test_every_command_shows_its_own_panel_first_then_the_shared_ones_in_order(path: tuple[str, ...]) -> None:
    text, command = render(path)
    titles = [title for title, _ in panels(text) if title != "Arguments"]
    assert titles[0] == path[-1].capitalize(), titles
    own = [title for title in titles[1:] if title not in OPTION_PANELS]  # more of its own (a cluster's)
    assert titles[1:1 + len(own)] == own, titles  # all of its own first
    shared = titles[1 + len(own):]
    assert shared == [p for p in OPTION_PANELS if p in shared], titles  # in order, none empty
    shown = [name for _, rows in panels(text) for name in rows if name.startswith("--")]
    declared = [param.opts[0] for param in command.params if param.param_type_name == "option" and not param.hidden]
    assert sorted(shown) == sorted([*declared, "--help"])  # each option once, in some panel (a refused one: none)


@pytest.mark.parametrize("path", all_commands())
def test_every_value_is_named_and_no_text_is_eaten(path: tuple[str, ...]) -> None:
    """No typer type label (<list[Path]>, <bool>, ...) stands for a value, and help is shown as written:
    rendered wide enough that nothing wraps, each option's help and the summary appear verbatim."""
    text, command = render(path)
    assert "list[" not in text and "<bool>" not in text and not TYPER_TYPES.search(text), text
    if path == ("serve",):
        return
    for param in command.params:
        assert param.metavar is not None, param.name  # a flag's is "" (it takes no value)
    wide, command = render(path, columns=1000)
    for param in command.params:
        if param.help and not param.hidden:
            assert param.help.replace("\\[", "[") in wide, param.help
    assert command.help.split("\n\n")[0].replace("\\[", "[") in wide
    assert "\\[" not in wide


@pytest.mark.parametrize("path", [("sweep",), ("capacity",), ("tune",), ("quality",)])
def test_measuring_flags_help_reads_as_declared(path: tuple[str, ...]) -> None:
    wide, command = render(path, columns=1000)
    hidden = {param.name for param in command.params if param.hidden}  # refused by this command
    for field in fields(MeasureFlags):
        assert (field.metadata["help"] in wide) == (field.name not in hidden), field.name
    assert "pip install 'llm-selfhost-bench[ray]'." in wide


@pytest.mark.parametrize("path", all_commands())
def test_every_help_ends_with_examples_the_real_command_line_parses(path: tuple[str, ...]) -> None:
    text, _ = render(path)
    lines = examples_at_the_end(text)
    assert 2 <= len(lines) <= 3, lines
    for line in lines:
        assert line.startswith("bench ") and len(line) <= 78, line  # on a line of its own at 80 columns too
        assert parse_error(line) is None, (line, parse_error(line))


def parse_error(line: str) -> str | None:
    """Why `line` is not a command the real `bench` takes (click's make_context, or serve's argparse), or None.
    Only what bench is given counts: a pipe's later commands are the shell's."""
    args = shlex.split(line.split(" | ")[0])[1:]
    command, path = get_command(app), ["bench"]
    while isinstance(command, TyperGroup):
        path.append(args.pop(0))
        command = command.commands[path[-1]]
    if path == ["bench", "serve"]:
        _, argv = _stack_flags(args)
        try:
            with contextlib.redirect_stderr(io.StringIO()) as err:
                parse_args(argv, prog="bench serve")
        except SystemExit:
            return err.getvalue()
        return None
    try:
        command.make_context(" ".join(path), args)
    except typer.TyperException as exc:  # click's usage errors, as typer carries them
        return exc.format_message()
    return None


def test_a_line_the_command_line_refuses_is_caught() -> None:
    """The examples' check says no to what the real command line refuses."""
    assert parse_error("bench sweep --concurrency 1,8 --no-such-flag") is not None
    assert parse_error("bench cost --gpu h100-sxm") is not None  # --throughput is required
    assert parse_error("bench serve --max-num-seqs many") is not None
    assert parse_error("bench sweep --concurrency 1,8") is None
