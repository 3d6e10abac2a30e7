"""The lifecycle every launched engine shares: start, wait until it answers, stop on every path.

A process is started in its own session (its own process group), its output goes to the run's
`engine.log`, and readiness is polled at `/health` (or `/v1/models`) while the process is watched: if it
dies during start-up the error carries the last lines of its log. On leaving the context, however it is
left (normal end, exception, Ctrl-C, SIGTERM turned into KeyboardInterrupt), the whole group gets SIGTERM,
then SIGKILL if it has not exited in time. Nothing is left running.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

LOG_TAIL_LINES = 25
POLL_INTERVAL_S = 0.25
STOP_GRACE_S = 15.0


class EngineStartError(Exception):
    """The engine did not become ready; the message says why and ends with the tail of its log."""


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    command: list[str]
    ready_urls: list[str]  # any one answering 200 means ready
    env: dict[str, str] = field(default_factory=dict)
    ready_timeout_s: float = 300.0


@dataclass(frozen=True)
class Started:
    pid: int
    time_to_ready_s: float


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_port_free(port: int, host: str = "127.0.0.1") -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            raise EngineStartError(f"port {port} is already in use on {host}; choose another with --port") from None


@contextmanager
def run_process(spec: ProcessSpec, log_path: Path) -> Iterator[Started]:
    """Start `spec.command`, wait until ready, yield, and always stop its whole process group."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        started_at = time.monotonic()
        try:
            process = subprocess.Popen(
                spec.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env={**os.environ, **spec.env},
            )
        except FileNotFoundError:
            raise EngineStartError(f"{spec.name}: cannot run '{spec.command[0]}': not found") from None
        try:
            _wait_until_ready(spec, process, log_path, started_at)
            yield Started(process.pid, time.monotonic() - started_at)
        finally:
            stop_process_group(process)


def _wait_until_ready(spec: ProcessSpec, process: subprocess.Popen[bytes], log_path: Path, started_at: float) -> None:
    deadline = started_at + spec.ready_timeout_s
    with httpx.Client(timeout=2.0) as client:
        while True:
            code = process.poll()
            if code is not None:
                raise EngineStartError(f"{spec.name} exited with code {code} during start-up; "
                                       f"last lines of {log_path}:\n{log_tail(log_path)}")
            if any(_answers(client, url) for url in spec.ready_urls):
                return
            if time.monotonic() > deadline:
                raise EngineStartError(f"{spec.name} was not ready after {spec.ready_timeout_s:g} s (raise "
                                       f"--ready-timeout if it loads slowly); last lines of {log_path}:\n"
                                       f"{log_tail(log_path)}")
            time.sleep(POLL_INTERVAL_S)


def _answers(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def stop_process_group(process: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the process's group, then SIGKILL it if anything is still running after `grace_s`."""
    try:
        group = os.getpgid(process.pid)
    except ProcessLookupError:
        process.wait()
        return
    _signal_group(group, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(group, signal.SIGKILL)  # children that outlived the leader, or a leader that ignored TERM
    process.wait()
    deadline = time.monotonic() + grace_s
    while _group_is_running(group) and time.monotonic() < deadline:
        time.sleep(0.05)


def _group_is_running(group: int) -> bool:
    """Whether any process of the group still runs (zombies waiting for their parent don't count)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def _signal_group(group: int, sig: signal.Signals) -> None:
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    if not path.is_file():
        return "(no log)"
    text = path.read_bytes()[-16384:].decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"
