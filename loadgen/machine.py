"""How busy the machine was with other work while a level ran, from /proc (Linux).

A level can be slowed by a program that has nothing to do with the run: a build, another benchmark, a
neighbour on the same VM. Two snapshots, before and after, give the CPU time the whole machine spent in
user and kernel code (irq and softirq left out: the run's own network traffic is counted there), the CPU
time of the run's own processes (the command, its children, and the engine's process tree when it runs
here), and the time the hypervisor gave the cores to someone else (steal). What is left over was used by
processes outside the run. Elsewhere than Linux nothing is read and the level says nothing.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from loadgen.types import BusyProcess, MachineLoad, WorkerRun

PROC = Path("/proc")
TICK_S = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
NUM_BUSIEST = 3


@dataclass(frozen=True)
class ProcessTimes:
    pid: int
    parent: int
    name: str
    cpu_s: float  # user + system, its reaped children's included


@dataclass(frozen=True)
class MachineSnapshot:
    taken_s: float  # time.monotonic()
    busy_s: float  # every core's user, nice and system time
    steal_s: float
    processes: dict[int, ProcessTimes]


def snapshot() -> MachineSnapshot | None:
    """The machine's CPU counters now; None where there is no /proc/stat to read."""
    try:
        fields = (PROC / "stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    ticks = [int(value) for value in fields[1:]]  # user nice system idle iowait irq softirq steal ...
    steal = ticks[7] if len(ticks) > 7 else 0
    return MachineSnapshot(time.monotonic(), sum(ticks[:3]) * TICK_S, steal * TICK_S, _processes())


def _processes() -> dict[int, ProcessTimes]:
    processes = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_bytes()
        except OSError:  # gone meanwhile
            continue
        name_end = raw.rindex(b")")  # the name may hold spaces and parentheses
        name = raw[raw.index(b"(") + 1:name_end].decode("utf-8", "replace")
        rest = raw[name_end + 2:].split()
        # after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15), counted from the state
        cpu_ticks = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
        pid = int(entry.name)
        processes[pid] = ProcessTimes(pid, int(rest[1]), name, cpu_ticks * TICK_S)
    return processes


def descendants(processes: dict[int, ProcessTimes], roots: Iterable[int]) -> set[int]:
    """The roots and every process below them."""
    children: dict[int, list[int]] = {}
    for process in processes.values():
        children.setdefault(process.parent, []).append(process.pid)
    found, stack = set(), [pid for pid in roots if pid in processes]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return found


def load_between(before: MachineSnapshot, after: MachineSnapshot, own_roots: Iterable[int],
                 workers: Iterable[WorkerRun] = ()) -> MachineLoad:
    """What processes outside the run (everything but `own_roots` and their descendants) and the hypervisor
    took between the two snapshots, in CPU seconds over the wall time between them. Client workers of the
    level that ran here outside that tree (Ray's actors) are the run's too; one already gone by the second
    snapshot counts the CPU it measured itself."""
    roots = list(own_roots)
    tree = descendants(before.processes, roots) | descendants(after.processes, roots)
    here = socket.gethostname()
    workers_here = [w for w in workers if w.host == here and w.pid not in tree]
    own = tree | {w.pid for w in workers_here}
    deltas = {pid: process.cpu_s - (before.processes[pid].cpu_s if pid in before.processes else 0.0)
              for pid, process in after.processes.items()}
    gone_s = sum(w.client.client_cpu_fraction * w.wall_s for w in workers_here if w.pid not in after.processes)
    own_s = sum(deltas.get(pid, 0.0) for pid in own) + gone_s
    others_s = max(0.0, after.busy_s - before.busy_s - own_s)
    busiest = sorted(((pid, seconds) for pid, seconds in deltas.items() if pid not in own and seconds > 0),
                     key=lambda item: -item[1])[:NUM_BUSIEST]
    return MachineLoad(
        wall_s=after.taken_s - before.taken_s, others_cpu_s=round(others_s, 3),
        steal_s=round(after.steal_s - before.steal_s, 3),
        busiest=[BusyProcess(pid, after.processes[pid].name, round(seconds, 3)) for pid, seconds in busiest],
    )


def listening_pid(port: int) -> int | None:
    """The process that listens on `port` on this machine (an endpoint someone else started), if one can be
    seen: its socket's inode in /proc/net/tcp{,6}, then the process holding that inode open."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            columns = line.split()
            local, state, inode = columns[1], columns[3], columns[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{inode}]")
    if not inodes:
        return None
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                return int(entry.name)
        except OSError:  # gone, or not ours to look at
            continue
    return None
