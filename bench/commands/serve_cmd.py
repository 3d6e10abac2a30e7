"""`bench serve`: the reference engine alone, or a stack around it (N replicas behind vllm-router, Open WebUI in
front), until Ctrl-C. The engine's own flags are its argparse parser's (engines.reference.serving.options);
`bench serve`'s own are taken out of the arguments first."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from bench.commands import stopping
from bench.commands.console import console, fail
from bench.commands.helptext import examples
from bench.inputs.flag_text import flag_name
from bench.inputs.measure_options import MeasureFlags

if TYPE_CHECKING:  # imported where they are used, so that `bench --help` stays light
    import argparse

    from engines.reference.serving.options import ServerOptions


def serve(ctx: typer.Context) -> None:
    """Run the reference engine alone: an OpenAI-compatible server for any client or UI.

    Takes the engine's own flags (`bench serve --help` lists them): --model, --port, --batching, ...; and
    --replicas N [--router-policy P] (behind vllm-router), --ui [--ui-port P] [--ui-python PY] [--ui-data DIR]
    (Open WebUI in front)."""
    from engines.reference.serving.options import parse_args

    stopping.install()
    if any(arg in ("-h", "--help") for arg in ctx.args):
        _serve_help()
        return
    stack, argv = _stack_flags(ctx.args)
    options = parse_args(argv, prog="bench serve")  # --help and a bad flag end here, as argparse does
    if stack.replicas is not None or stack.ui:
        _serve_stack(argv, options, stack)
        return
    try:
        from engines.reference.serving.server import serve as serve_forever

        stopped_by = serve_forever(options)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:  # a stop signal while the model was still loading
        raise typer.Exit(stopping.exit_code()) from None
    raise typer.Exit(128 + stopped_by if stopped_by else 0)


def _stack_flags(args: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """`bench serve`'s own flags (replicas, router, UI) taken out of its arguments; the rest are the engine's."""
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    _add_stack_flags(parser)
    return parser.parse_known_args(args)


def _add_stack_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`bench serve`'s own flags; those a measuring command takes too are its (MeasureFlags' fields), help and all."""
    _add_measure_flag(parser, "replicas", type=int)
    _add_measure_flag(parser, "router_policy", default="round_robin")
    _add_measure_flag(parser, "router_arg", action="append", default=[])
    parser.add_argument("--ui", action="store_true", help="Open WebUI in front of the engine")
    parser.add_argument("--ui-port", type=int, default=8080, metavar="PORT", help="the UI's port (default 8080)")
    _add_measure_flag(parser, "ui_python")
    parser.add_argument("--ui-data", type=Path, default=Path.home() / ".local" / "share" / "bench" / "openwebui",
                        metavar="DIR",
                        help="where the UI keeps its data and the account it signs in with")


def _add_measure_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup, name: str, **how: Any) -> None:
    """A field of MeasureFlags as an argparse flag: its name, help and value's name as the measuring commands show
    them (the help in the engine's flags' style: lower case, no final stop); `how` says what argparse does with it
    (its type, its default here)."""
    declared = next(f for f in fields(MeasureFlags) if f.name == name)
    text = declared.metadata["help"].removesuffix(".")
    text = text[0].lower() + text[1:] if text[1:2].islower() else text  # a word, not a name like KEY=VALUE
    parser.add_argument(flag_name(name), metavar=declared.metadata["metavar"], help=text, **how)


SERVE_EXAMPLES = examples("bench serve --model default --port 8000",
                          "bench serve --model default --replicas 2 --router-policy cache_aware",
                          "bench serve --model default --ui")


def _serve_help() -> None:
    """The engine's flags and `bench serve`'s own (replicas, router, UI), in one help, examples last."""
    import argparse

    from engines.reference.serving.options import build_parser

    parser = build_parser("bench serve")
    _add_stack_flags(parser.add_argument_group("bench serve's own flags (a stack around the engine)"))
    parser.formatter_class, parser.epilog = argparse.RawDescriptionHelpFormatter, SERVE_EXAMPLES  # a line each
    parser.print_help()


def _serve_stack(argv: list[str], options: ServerOptions, stack: argparse.Namespace) -> None:
    """The reference engine (or N replicas behind vllm-router), with Open WebUI in front when asked, until
    Ctrl-C (or SIGTERM); everything stopped then, the UI first (bench.flows.serve)."""
    from bench.commands.display import RichJobWatcher
    from bench.flows.serve import ServeStack, serve_stack, ui_data_note
    from engines.launch import EngineStartError
    from engines.reference.serving.options import api_key_of

    around = ServeStack(**vars(stack))
    try:  # the key goes to the engines in their environment, never on their command line
        serve_stack(argv, options.port or None, api_key_of(options), around, RichJobWatcher().say)
    except (EngineStartError, ValueError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        if around.ui:
            console.print(f"stopped; {ui_data_note(around.ui_data)}", highlight=False, soft_wrap=True)
        raise typer.Exit(stopping.exit_code()) from None
