"""The lifecycle every launched engine shares: start, wait until it answers, stop on every path.

A process is started in its own session (its own process group), its output goes to the run's
`engine.log`, and readiness is polled at `/health` (or `/v1/models`) while the process is watched: if it
dies during start-up the error carries the last lines of its log. Once the port answers, every socket
listening on it must be the child's (`engines.ports`): a port someone else bound first is refused by name,
before anything is sent there, and the child is stopped. On leaving the context, however it is
left (normal end, exception, Ctrl-C, SIGTERM or SIGHUP turned into KeyboardInterrupt), the whole group
gets SIGTERM, then SIGKILL if it has not exited in time; a stop signal arriving meanwhile waits until the
engine is gone. If the command itself is killed outright, `engines.lifeline` stops the engine instead.
Nothing is left running.

The port choice, the readiness loop and the version probe serve containers too (`engines.docker`); this
module knows nothing of engine kinds, their flags or the Docker API.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from engines import lifeline, ports

ENGINE_LOG = "engine.log"  # in the run directory
LOG_TAIL_LINES = 25
POLL_INTERVAL_S = 0.25
STOP_GRACE_S = 15.0


class EngineStartError(Exception):
    """The engine did not become ready; the message says why and ends with the tail of its log."""


class EngineGone(Exception):
    """A launched engine stopped answering in the middle of a run; the message says where to look."""


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    command: list[str]
    ready_urls: list[str]  # any one answering 200 means ready
    env: dict[str, str] = field(default_factory=dict)
    ready_timeout_s: float = 300.0
    cpus: tuple[int, ...] | None = None  # the cores it is pinned to (a replica's share); None: wherever
    private: bool = False  # every file it makes is its owner's only (umask 077): a UI's accounts and keys


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


def local_port(port: int | None) -> tuple[int, str]:
    """The port asked for (refused at once when taken) or a free one, and the server's root URL on it."""
    if port is not None:
        check_port_free(port)
    port = port or free_port()
    return port, f"http://127.0.0.1:{port}"


@contextmanager
def run_process(spec: ProcessSpec, log_path: Path) -> Iterator[Started]:
    """Start `spec.command`, wait until ready, yield, and always stop its whole process group.

    The process is tied to this one (`engines.lifeline`): marked with its owner and the run id (the name of
    the directory that holds the log), killed by the kernel if this process dies, and watched."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **spec.env, **lifeline.process_marks(log_path.parent.name)}
    with log_path.open("ab") as log:
        started_at = time.monotonic()
        try:
            process = subprocess.Popen(
                spec.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=env,
                preexec_fn=_in_child(lifeline.die_with_parent(), spec.cpus, spec.private),
            )
        except FileNotFoundError:
            raise EngineStartError(f"{spec.name}: cannot run '{spec.command[0]}': not found") from None
        watcher = None
        port = _loopback_port(spec.ready_urls)
        try:
            watcher = lifeline.start_watcher(log_path, group=process.pid)
            try:
                wait_until_ready(spec.name, spec.ready_urls, spec.ready_timeout_s, started_at, exit_code=process.poll,
                                 log_tail=lambda: log_tail(log_path), log_name=str(log_path),
                                 answered=lambda: refuse_strangers(spec.name, port, process.pid))
            except EngineStartError:
                refuse_strangers(spec.name, port, process.pid)  # one who took the port explains a child that died
                raise
            yield Started(process.pid, time.monotonic() - started_at)
        finally:
            stop_process_group(process)
            lifeline.stand_down(watcher)


def refuse_strangers(name: str, port: int | None, leader: int) -> None:
    """An EngineStartError if anyone but the child `leader` (its session, its descendants) listens on `port`:
    whatever answered there is not our engine, and must be told nothing."""
    if port is None:
        return
    found = ports.strangers(port, leader)
    if found:
        who = "; ".join(holder.describe() for holder in found)
        raise EngineStartError(f"{name}: port {port} was taken by another process ({who}) before {name} could "
                               "listen on it, so what answers there is not the engine bench started; the engine "
                               "was stopped. Stop that process, or choose another port")


def _loopback_port(urls: list[str]) -> int | None:
    """The port of the first readiness URL on this machine's loopback (what a launched child listens on)."""
    for url in urls:
        parsed = urlsplit(url)
        if parsed.hostname in ("127.0.0.1", "localhost") and parsed.port:
            return parsed.port
    return None


def _in_child(tie: Callable[[], None] | None, cpus: tuple[int, ...] | None,
              private: bool = False) -> Callable[[], None] | None:
    """What the child does before it runs the command: pin itself to `cpus` (before any thread pool starts,
    so every thread it makes stays there), make its files private, and tie itself to this process."""
    if cpus is None and not private:
        return tie

    def start() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        if private:
            os.umask(0o077)
        if tie is not None:
            tie()

    return start


def wait_until_ready(
    name: str, urls: list[str], timeout_s: float, started_at: float, *, exit_code: Callable[[], int | None],
    log_tail: Callable[[], str], log_name: str, answered: Callable[[], None] | None = None,
) -> None:
    """Poll until one of `urls` answers 200, then call `answered` (which raises if who answered is not the
    engine). Fails fast once `exit_code()` gives the engine's exit code (it died), or after `timeout_s` from
    `started_at`; either error ends with `log_tail()`, the last lines of `log_name`."""
    deadline = started_at + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while True:
            code = exit_code()
            if code is not None:
                raise EngineStartError(f"{name} exited with code {code} during start-up; "
                                       f"last lines of {log_name}:\n{log_tail()}")
            if any(_answers(client, url) for url in urls):
                if answered is not None:
                    answered()
                return
            if time.monotonic() > deadline:
                raise EngineStartError(f"{name} was not ready after {timeout_s:g} s (raise ready_timeout_s in an "
                                       f"--engine-file if it loads slowly); last lines of {log_name}:\n"
                                       f"{log_tail()}")
            time.sleep(POLL_INTERVAL_S)


def still_answering(base_url: str, timeout_s: float = 10.0) -> bool:
    """Whether the OpenAI API at `base_url` (ending in /v1) still answers for its models (asking for a key,
    as a UI in front of the engine does, is answering)."""
    try:
        return httpx.get(base_url.rstrip("/") + "/models", timeout=timeout_s).status_code in (200, 401, 403)
    except httpx.HTTPError:
        return False


def _answers(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def server_version(root: str, *paths: str) -> str | None:
    """The `version` field of the first of `paths` (under the server's root URL) that answers with one."""
    for path in paths:
        try:
            version = httpx.get(root + path, timeout=5).json().get("version")
        except (httpx.HTTPError, ValueError, AttributeError):
            continue
        if version:
            return str(version)
    return None


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_signals_held() -> Iterator[None]:
    """Stopping an engine is not itself interrupted: a stop signal that arrives meanwhile is held, then
    delivered to its previous handler once the block is done (only the main thread can handle signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if held:
            signal.raise_signal(held[0])


def stop_process_group(process: subprocess.Popen[bytes], grace_s: float | None = None) -> None:
    """SIGTERM the process's group, then SIGKILL it if anything is still running after `grace_s`."""
    with stop_signals_held():
        _stop_process_group(process, STOP_GRACE_S if grace_s is None else grace_s)


def _stop_process_group(process: subprocess.Popen[bytes], grace_s: float) -> None:
    try:
        group = os.getpgid(process.pid)
    except ProcessLookupError:
        process.wait()
        return
    lifeline.signal_group(group, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    lifeline.signal_group(group, signal.SIGKILL)  # children that outlived the leader, or a leader that ignored TERM
    process.wait()
    deadline = time.monotonic() + grace_s
    while lifeline.group_is_running(group) and time.monotonic() < deadline:
        time.sleep(0.05)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    if not path.is_file():
        return "(no log)"
    text = path.read_bytes()[-16384:].decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"
