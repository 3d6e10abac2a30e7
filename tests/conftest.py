from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# The commands' piped output is PIPED_WIDTH (100) wide unless COLUMNS says otherwise; the tests read whole table
# rows, so they ask for wide output (the width itself is tested with COLUMNS set and unset).
os.environ["COLUMNS"] = "200"

from tests.servers import ScriptedServer, scripted_server


@pytest.fixture(scope="session")
def _scripted_server_process() -> Iterator[ScriptedServer]:
    with scripted_server() as server:
        yield server


@pytest.fixture
def scripted(_scripted_server_process: ScriptedServer) -> ScriptedServer:
    """The scripted server, reset to its default script (TTFT 100 ms, 20 ms per token, no faults), with its
    request logs emptied so a test sees only its own requests."""
    _scripted_server_process.set_script()
    _scripted_server_process.models()
    _scripted_server_process.prompts()
    return _scripted_server_process


@pytest.fixture
def cli() -> Iterator[Callable[..., Any]]:
    """`bench` run in this process (typer's CliRunner): for refusals that come before anything starts, without
    a Python start-up each. The stop-signal handlers a command installs are put back afterwards."""
    import signal

    from typer.testing import CliRunner

    from bench.commands.cli import app

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    runner = CliRunner()
    try:
        yield lambda *args, env=None: runner.invoke(app, list(args), env=env)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
