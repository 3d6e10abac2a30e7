"""Nothing a command launched outlives it, however the command ends (SIGKILL included).

Two ties, since neither alone covers every path:
- the kernel's: an engine process is started with a parent-death signal (Linux `PR_SET_PDEATHSIG`), so it
  is killed the moment the command that started it dies;
- a watcher: `python -m engines.lifeline`, one small process beside each launched engine, which polls for
  the command's death and then stops what the kernel's tie does not reach: the rest of the engine's
  process group, every process carrying the command's owner mark in its environment (an engine's own
  workers included), and the engine's container.

Every launched process gets the owner mark (`LLM_SELFHOST_BENCH_OWNER=<pid>:<start time>`) in its
environment and every container the same as a label, so a later command can find what an earlier one
left behind (`leftovers`, `bench clean`). An owner is judged alive by this host's /proc, so a container also
names the host that started it (`host_id`): on a Docker daemon that several hosts share, another host's
containers are never judged, nor removed, from here.

    python -m engines.lifeline --parent PID --owner OWNER [--group PGID] [--container NAME] [--log FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from common.processes import terminate

if TYPE_CHECKING:  # the docker SDK is an optional extra, imported where containers are looked at
    from docker import DockerClient
    from docker.models.containers import Container

OWNER_ENV = "LLM_SELFHOST_BENCH_OWNER"
RUN_ENV = "LLM_SELFHOST_BENCH_RUN"
ENGINE_LABEL = "llm-selfhost-bench"  # value: the engine kind
OWNER_LABEL = "llm-selfhost-bench.owner"
RUN_LABEL = "llm-selfhost-bench.run"
HOST_LABEL = "llm-selfhost-bench.host"
MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
POLL_S = 0.1
GRACE_S = 3.0
CONTAINER_SETTLE_S = 5.0  # a container whose creation was under way when the command died may appear late
PR_SET_PDEATHSIG = 1
PROC = Path("/proc")


def owner_id(pid: int | None = None) -> str:
    """`<pid>:<start time in clock ticks>`: names one process even after its pid is reused."""
    pid = pid or os.getpid()
    stat = _stat(pid)
    return f"{pid}:{stat[1] if stat else 0}"


def is_alive(owner: str) -> bool:
    """Whether the process `owner_id` named is still running (a zombie is not)."""
    pid_text, _, start = owner.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if not PROC.is_dir():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z" and start in ("", "0", str(stat[1]))


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of a process from /proc, or None when it is gone."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[19])


def process_marks(run_id: str) -> dict[str, str]:
    """The environment variables that mark a launched process as this command's."""
    return {OWNER_ENV: owner_id(), RUN_ENV: run_id}


def container_labels(engine: str, run_id: str) -> dict[str, str]:
    return {ENGINE_LABEL: engine, OWNER_LABEL: owner_id(), RUN_LABEL: run_id, HOST_LABEL: host_id()}


@functools.cache
def host_id() -> str:
    """This host as its containers' labels name it: `<hostname>/<machine-id>`. Both, since either alone may be
    shared (cloned machines keep one machine-id; containers on one host, each its own /proc, share it)."""
    machine = next((text for path in MACHINE_ID_FILES if (text := _read(path))), "")
    return f"{socket.gethostname()}/{machine}" if machine else socket.gethostname()


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that gives the child a parent-death SIGKILL, or None where the kernel has no such tie.

    Linux sends it when the *thread* that started the child ends, so it is only used from the main thread
    (which lives as long as the process); elsewhere the watcher alone stands guard."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork: the child only calls it
    parent = os.getpid()

    def tie() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the tie was made
            os._exit(1)

    return tie


def start_watcher(log_path: Path, group: int | None = None, container: str | None = None) -> subprocess.Popen[bytes]:
    """A watcher that stands by until `stand_down`: if this process dies first, it stops `group`, every
    process marked as ours, and `container`, and says so in `log_path`."""
    command = [sys.executable, "-m", "engines.lifeline", "--parent", str(os.getpid()), "--owner", owner_id(),
               "--log", str(log_path)]
    command += ["--group", str(group)] if group is not None else []
    command += ["--container", container] if container else []
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def stand_down(watcher: subprocess.Popen[bytes] | None) -> None:
    """Tell a watcher its engine was stopped by the command itself: it exits, doing nothing."""
    if watcher is not None:
        terminate(watcher)


def watch(parent: int, owner: str, group: int | None, container: str | None, log_path: Path | None) -> None:
    """Wait for `parent` to die, then stop what it left. SIGTERM (the parent standing us down) ends the wait
    with nothing done; Ctrl-C and a closed terminal are the parent's to handle, not ours."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while os.getppid() == parent:
        time.sleep(POLL_S)
    stopped = stop_processes(owner, group)
    removed = remove_containers(owner, container) if container else []
    if log_path is not None and (stopped or removed):
        with log_path.open("a") as log:
            log.write(f"lifeline: the command that launched this engine died; stopped processes {stopped}, "
                      f"removed containers {removed}\n")


def marked_processes(owner: str | None = None) -> dict[int, str]:
    """pid -> owner of every process whose environment carries an owner mark (only `owner`'s if given)."""
    found = {}
    for environ in PROC.glob("[0-9]*/environ"):
        pid = int(environ.parent.name)
        mark = _environment(pid).get(OWNER_ENV)
        if mark is not None and (owner is None or mark == owner):
            found[pid] = mark
    return found


def stop_processes(owner: str, group: int | None = None, grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM the group and every process marked as `owner`'s, then SIGKILL what is left after `grace_s`."""
    pids = set(marked_processes(owner))
    groups = {group} if group is not None else set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            pass
    targets = [("group", g) for g in groups if g > 1] + [("pid", p) for p in pids]
    _send(targets, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _any_running(pids, groups):
        time.sleep(0.05)
    _send(targets, signal.SIGKILL)
    return sorted(pids | groups)


def _send(targets: list[tuple[str, int]], sig: signal.Signals) -> None:
    for kind, number in targets:
        if kind == "group":
            signal_group(number, sig)
            continue
        try:
            os.kill(number, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _any_running(pids: set[int], groups: set[int]) -> bool:
    return any(_is_running(pid) for pid in pids) or any(group_is_running(group) for group in groups)


def _is_running(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def signal_group(group: int, sig: signal.Signals) -> None:
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_is_running(group: int) -> bool:
    """Whether any process of the group still runs (zombies waiting for their parent don't count)."""
    if not PROC.is_dir():
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for stat in PROC.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def remove_containers(owner: str, name: str | None = None, client: DockerClient | None = None,
                      settle_s: float = CONTAINER_SETTLE_S) -> list[str]:
    """Stop and remove every container labelled as `owner`'s; if `name` is not among them, look again for
    `settle_s` (its creation may have been under way when its command died)."""
    try:
        client = client or _docker()
    except Exception:
        return []
    removed: list[str] = []
    deadline = time.monotonic() + settle_s
    while True:
        mine = {"label": [f"{OWNER_LABEL}={owner}", f"{HOST_LABEL}={host_id()}"]}
        found = [c for c in client.containers.list(all=True, filters=mine) if c.name not in removed]
        for container in found:
            stop_and_remove_container(container)
            removed.append(str(container.name))
        if name in removed or time.monotonic() > deadline:
            return removed
        time.sleep(0.5)


def _docker() -> DockerClient:
    import docker

    client = docker.from_env(timeout=10)
    client.ping()
    return client


def stop_and_remove_container(container: Container, timeout_s: float = GRACE_S) -> None:
    """SIGTERM, then SIGKILL after `timeout_s`, then remove; a container already gone is no error."""
    import docker

    try:
        container.stop(timeout=int(timeout_s))
    except docker.errors.DockerException:
        pass
    try:
        container.remove(force=True)
    except docker.errors.DockerException:
        pass


@dataclass(frozen=True)
class Leftover:
    """An engine process or container whose launching command is gone."""

    kind: str  # "process" or "container"
    name: str  # pid or container name
    run_id: str | None
    owner: str | None
    host: str | None = None  # a container's: the host that started it

    def describe(self) -> str:
        run = f" of run {self.run_id}" if self.run_id else ""
        return f"{self.kind} {self.name}{run}"


def leftover_processes() -> list[Leftover]:
    found = []
    for pid, owner in marked_processes().items():
        if not is_alive(owner):
            found.append(Leftover("process", str(pid), _environment(pid).get(RUN_ENV), owner))
    return found


def leftover_containers(client: DockerClient) -> list[Leftover]:
    """This host's containers with our label whose owner is gone (or that carry no owner)."""
    return [item for item in _our_containers(client)
            if item.host == host_id() and (item.owner is None or not is_alive(item.owner))]


def containers_elsewhere(client: DockerClient) -> list[Leftover]:
    """Containers with our label that another host started, or that name no host (an older version's): their
    owners ran in another /proc, so nothing here can tell whether they are gone."""
    return [item for item in _our_containers(client) if item.host != host_id()]


def _our_containers(client: DockerClient) -> list[Leftover]:
    found = []
    for container in client.containers.list(all=True, filters={"label": ENGINE_LABEL}):
        labels = container.labels or {}
        found.append(Leftover("container", str(container.name), labels.get(RUN_LABEL), labels.get(OWNER_LABEL),
                              labels.get(HOST_LABEL)))
    return found


def remove_leftovers(leftovers: list[Leftover], client: DockerClient | None = None) -> None:
    for owner in {item.owner for item in leftovers if item.kind == "process" and item.owner}:
        stop_processes(owner)
    for item in leftovers:
        if item.kind == "container" and client is not None:
            import docker

            try:
                stop_and_remove_container(client.containers.get(item.name))
            except docker.errors.NotFound:
                pass


def _environment(pid: int) -> dict[str, str]:
    try:
        entries = (PROC / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return {}
    pairs = (entry.decode(errors="replace").partition("=") for entry in entries if b"=" in entry)
    return {key: value for key, _, value in pairs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engines.lifeline", description=__doc__.split("\n")[0])
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--group", type=int, default=None)
    parser.add_argument("--container", default=None)
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args(argv)
    watch(args.parent, args.owner, args.group, args.container, args.log)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
