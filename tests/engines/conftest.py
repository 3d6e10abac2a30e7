"""Container tests run against a real Docker-compatible engine: podman (see tests/podman.py)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator

import pytest

from tests.podman import IMAGE, ROOT, host_mounts, podman_docker_api

__all__ = ["IMAGE", "ROOT", "host_mounts", "podman_api", "scripted_server_command"]


@pytest.fixture(scope="session")
def podman_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """DOCKER_HOST of a podman API service started for this session."""
    missing = [tool for tool in ("podman", "runc") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {' and '.join(missing)} for a Docker-compatible API (./run-tests.sh installs them "
                    "where apt-get can)")
    with podman_docker_api(tmp_path_factory.mktemp("podman")) as docker_host:
        yield docker_host


def scripted_server_command(port: int = 8000) -> list[str]:
    return [sys.executable, "-m", "scripted", "--host", "0.0.0.0", "--port", str(port),
            "--ttft-ms", "10", "--itl-ms", "2"]
