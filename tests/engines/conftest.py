"""A real Docker-compatible engine for container tests: podman serving the Docker API on a socket of the
test session's own, and a small image built here (no registry is reachable): an empty root filesystem
imported with `podman import`, into which the host's Python and this project are mounted read-only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/bench-empty:test"
CONTAINERS_CONF = ROOT / "tests" / "containers.conf"  # runc, and ulimits this VM accepts


@pytest.fixture(scope="session")
def podman_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """DOCKER_HOST of a podman API service started for this session."""
    assert shutil.which("podman"), "podman is needed for container tests (.ci/run installs it)"
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    socket = tmp_path_factory.mktemp("podman") / "podman.sock"
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket}"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not socket.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    _import_empty_image(tmp_path_factory.mktemp("rootfs"), env)
    previous = {name: os.environ.get(name) for name in ("DOCKER_HOST", "CONTAINERS_CONF")}
    os.environ.update(DOCKER_HOST=f"unix://{socket}", CONTAINERS_CONF=str(CONTAINERS_CONF))
    try:
        yield f"unix://{socket}"
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        service.terminate()
        service.wait(timeout=20)


def _import_empty_image(folder: Path, env: dict[str, str]) -> None:
    for name in ("tmp", "proc", "sys", "dev", "etc", "root", "usr", "lib", "lib64", "bin", "sbin"):
        (folder / "rootfs" / name).mkdir(parents=True, exist_ok=True)
    tar_path = folder / "rootfs.tar"
    with tarfile.open(tar_path, "w") as tar:
        tar.add(folder / "rootfs", arcname=".")
    subprocess.run(["podman", "import", str(tar_path), IMAGE], env=env, check=True, capture_output=True)


def host_mounts() -> dict[str, str]:
    """The host's system and Python, and this project, read-only: enough to run our scripted server."""
    paths = ["/usr", "/lib", "/lib64", "/bin", "/sbin", sys.base_prefix, sys.prefix, str(ROOT)]
    return {path: f"{path}:ro" for path in dict.fromkeys(paths) if Path(path).exists()}


def scripted_server_command(port: int = 8000) -> list[str]:
    return [sys.executable, "-m", "loadgen.scripted_server", "--host", "0.0.0.0", "--port", str(port),
            "--ttft-ms", "10", "--itl-ms", "2"]
