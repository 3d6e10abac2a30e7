from __future__ import annotations

import os
from collections.abc import Iterator

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
    """The scripted server, reset to its default script (TTFT 100 ms, 20 ms per token, no faults)."""
    _scripted_server_process.set_script()
    return _scripted_server_process
