"""The measuring flags: each declared once (a field of `MeasureFlags`), and every measuring command takes them
with that field's default and help, handed to it as one `MeasureFlags`; the ones a command refuses are hidden
from its help and end it with the reason."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import typer
from rich.markup import escape
from typer.main import get_command
from typer.testing import CliRunner

from bench.commands.cli import app
from bench.commands.flags import MeasureFlags, measure_command
from bench.commands.helptext import OPTION_PANELS


def _options(command: str) -> dict[str | None, typer.core.TyperOption]:
    group = get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return {param.name: param for param in group.commands[command].params if isinstance(param, typer.core.TyperOption)}


@pytest.mark.parametrize("command", ["sweep", "capacity", "tune", "quality"])
def test_every_measuring_command_takes_each_field_with_its_default_help_panel_and_value_name(command: str) -> None:
    options = _options(command)
    for field in fields(MeasureFlags):
        option = options[field.name]
        assert option.help == escape(field.metadata["help"]) and option.help  # rich markup: shown as written
        assert option.rich_help_panel == field.metadata["panel"] and option.rich_help_panel in OPTION_PANELS
        assert option.metavar == ("" if option.is_flag else field.metadata["metavar"]) and option.metavar is not None
        assert option.default == field.default
        assert f"--{field.name.replace('_', '-')}" in option.opts


@pytest.mark.parametrize(("command", "refused"), [
    ("sweep", set()), ("capacity", {"adapter_counts"}),
    ("tune", {"report", "engine_file", "through_ui", "ui_python"}),
    ("quality", {"duration", "requests", "warmup", "repeats", "resume", "adapter_counts", "workload", "sessions",
                 "max_think_s", "time_scale", "trace_window"}),
])
def test_each_command_shows_only_the_flags_it_uses(command: str, refused: set[str]) -> None:
    hidden = {name for name, option in _options(command).items() if option.hidden}
    assert hidden == refused
    shown = " ".join(CliRunner().invoke(app, [command, "--help"], terminal_width=200).output.split())
    for name in refused:
        assert f"--{name.replace('_', '-')} " not in shown
    for field in fields(MeasureFlags):
        if field.name not in refused and field.name != "report":  # a bool shows as --report / --no-report
            assert f"--{field.name.replace('_', '-')}" in shown, field.name


def test_a_refused_flag_ends_the_command_with_its_reason_before_it_runs() -> None:
    ran: list[MeasureFlags] = []
    toy_app = typer.Typer()
    toy_app.command()(measure_command(lambda flags: ran.append(flags), refuses={"duration": "it sets its own"}))
    result = CliRunner().invoke(toy_app, ["--duration", "3"])
    assert result.exit_code == 2 and "--duration: it sets its own" in result.output and ran == []
    assert CliRunner().invoke(toy_app, ["--requests", "3"]).exit_code == 0 and ran == [MeasureFlags(requests=3)]


def test_a_command_gets_the_flags_as_one_record_and_its_own_options_apart() -> None:
    got: list[tuple[MeasureFlags, int]] = []

    def toy(flags: MeasureFlags, level: int = typer.Option(1, help="its own")) -> None:
        got.append((flags, level))

    toy_app = typer.Typer()
    toy_app.command()(measure_command(toy))
    toy_app.command("other")(lambda: None)  # two commands: typer then names them
    result = CliRunner().invoke(toy_app, ["toy", "--engine", "vllm", "--engine", "sglang", "--duration", "2.5",
                                          "--no-report", "--keep-text", "--out", "/tmp/o", "--level", "3"])
    assert result.exit_code == 0, result.output
    assert got == [(MeasureFlags(engine=["vllm", "sglang"], duration=2.5, report=False, keep_text=True,
                                 out=Path("/tmp/o")), 3)]
    assert got[0][0].given() == ["--engine", "--duration", "--keep-text"]  # out and report are not settings


def test_no_flag_given_is_the_default_record() -> None:
    got: list[MeasureFlags] = []
    toy_app = typer.Typer()
    toy_app.command()(measure_command(lambda flags: got.append(flags)))
    assert CliRunner().invoke(toy_app, []).exit_code == 0
    assert got == [MeasureFlags()] and got[0].given() == []
