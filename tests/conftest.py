from __future__ import annotations

from collections.abc import Iterator

import pytest

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
