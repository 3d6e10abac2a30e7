"""A real Docker-compatible engine on this machine, for container tests and benchmarks: podman serving the
Docker API on a socket of our own, and a small image built here (no registry is reachable): an empty root
filesystem imported with `podman import`, into which the host's Python and this project are mounted
read-only, so a container runs the same code on the same cores as a process does."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "localhost/bench-empty:test"
CONTAINERS_CONF = ROOT / "tests" / "containers.conf"  # runc, and ulimits this VM accepts
ROOTFS_DIRS = ("tmp", "proc", "sys", "dev", "etc", "root", "usr", "lib", "lib64", "bin", "sbin")


@contextmanager
def podman_docker_api(folder: Path) -> Iterator[str]:
    """Serve podman's Docker API on `folder/podman.sock` with IMAGE imported; DOCKER_HOST (and podman's
    configuration) point at it while the block runs. Yields the DOCKER_HOST value."""
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    socket = folder / "podman.sock"
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket}"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not socket.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    import_empty_image(folder, env)
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


def import_empty_image(folder: Path, env: dict[str, str]) -> None:
    for name in ROOTFS_DIRS:
        (folder / "rootfs" / name).mkdir(parents=True, exist_ok=True)
    tar_path = folder / "rootfs.tar"
    with tarfile.open(tar_path, "w") as tar:
        tar.add(folder / "rootfs", arcname=".")
    subprocess.run(["podman", "import", str(tar_path), IMAGE], env=env, check=True, capture_output=True)


def host_mounts() -> dict[str, str]:
    """The host's system and Python, and this project, read-only: enough to run our servers inside."""
    paths = ["/usr", "/lib", "/lib64", "/bin", "/sbin", sys.base_prefix, sys.prefix, str(ROOT)]
    return {path: f"{path}:ro" for path in dict.fromkeys(paths) if Path(path).exists()}


def reference_container_file(model: str) -> dict[str, object]:
    """An engine file (`engine: container`) that runs the reference engine inside IMAGE."""
    return {
        "engine": "container", "name": "reference-container", "image": IMAGE, "gpus": "none", "served_model": model,
        "command": [sys.executable, "-m", "engines.reference", "--model", model, "--served-model-name", model,
                    "--host", "0.0.0.0", "--port", "8000"],
        "container_port": 8000, "working_dir": str(ROOT), "ready_timeout_s": 300, "volumes": host_mounts(),
    }
