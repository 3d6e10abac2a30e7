"""The flow of `bench serve` with a stack around the reference engine: N replicas behind vllm-router and/or
Open WebUI in front, until Ctrl-C. Every process is entered into one ExitStack, so all of them stop on every
way out (the UI first). Nothing here prints: what runs where is said through the command's `Say`."""

from __future__ import annotations

import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from bench.flows.measure import Say
from engines.types import Endpoint


@dataclass(frozen=True)
class ServeStack:
    """`bench serve`'s own flags: what stands around the engine."""

    replicas: int | None  # None: one engine, no router
    router_policy: str
    router_arg: list[str]  # KEY=VALUE, to vllm-router as --KEY VALUE
    ui: bool
    ui_port: int
    ui_python: str | None
    ui_data: Path


def serve_stack(argv: list[str], port: int | None, api_key: str | None, stack: ServeStack, say: Say) -> None:
    """The reference engine with `argv` (or `stack.replicas` of it behind vllm-router) on `port` (None: a free
    one), Open WebUI in front when asked, each said as it is ready; then runs until Ctrl-C, whose
    KeyboardInterrupt is the caller's. `api_key` reaches the engines in their environment, never their command
    line. Raises EngineStartError or ValueError for what could not start."""
    from engines.openwebui import find_openwebui

    logs = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    argv = without(argv, "--api-key", "--api-key-env")
    if stack.ui:
        find_openwebui(stack.ui_python)  # said before the engine loads
    with ExitStack() as running:
        endpoint = _engines(running, argv, port, api_key, stack, logs, say)
        if stack.ui:
            _ui(running, endpoint, stack, logs, say)
        say(f"logs in {logs}. Ctrl-C stops them all.")
        while True:
            time.sleep(3600)


def _engines(running: ExitStack, argv: list[str], port: int | None, api_key: str | None, stack: ServeStack,
             logs: Path, say: Say) -> Endpoint:
    """The reference engine, or its replicas behind vllm-router, entered into `running`."""
    from engines.process import launch_reference_argv, parse_engine_args
    from engines.replicas import budgeted, launch_replicas

    argv = without(argv, "--port", "--host")
    if stack.replicas is None:
        endpoint, _ = running.enter_context(launch_reference_argv(logs, argv, port=port, api_key=api_key))
        say(f"reference engine at {endpoint.base_url}, model {endpoint.model}")
        return endpoint
    replicas = budgeted(lambda budget: lambda run_dir: launch_reference_argv(
        run_dir, argv, env=budget.env(), cpus=budget.cpus, api_key=api_key), stack.replicas)
    endpoint, info = running.enter_context(launch_replicas(
        replicas, logs, stack.router_policy, port, router_args=dict(parse_engine_args(stack.router_arg))))
    urls = ", ".join(r["base_url"] for r in info.details["replicas"])
    say(f"{info.name} behind vllm-router ({stack.router_policy}) at {endpoint.base_url} (replicas: {urls}), model "
        f"{endpoint.model}")
    return endpoint


def _ui(running: ExitStack, endpoint: Endpoint, stack: ServeStack, logs: Path, say: Say) -> None:
    """Open WebUI in front of `endpoint`, entered into `running`, and how to sign in."""
    from engines.openwebui import CREDENTIALS, launch_openwebui

    ui = running.enter_context(launch_openwebui(logs, endpoint, stack.ui_data, stack.ui_port, stack.ui_python))
    say(f"Open WebUI {ui.version or ''} at {ui.root}: sign in as {ui.account.email} with password "
        f"{ui.account.password} (kept in {stack.ui_data / CREDENTIALS})")
    say(ui_data_note(stack.ui_data))


def ui_data_note(data: Path) -> str:
    return (f"Open WebUI's data (accounts, API keys, chats) stays in {data}, its owner's only (0700), for the next "
            f"start; remove it with: rm -rf {data}")


def without(argv: list[str], *flags: str) -> list[str]:
    """`argv` less each of `flags` and its value (`--port 8000` or `--port=8000`)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        elif not any(arg.startswith(flag + "=") for flag in flags):
            kept.append(arg)
    return kept
