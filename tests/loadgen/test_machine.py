"""What else the machine did while a level ran: real processes, read from /proc."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from loadgen.machine import MachineSnapshot, ProcessTimes, descendants, listening_pid, load_between, snapshot
from loadgen.metrics import MAX_OUTSIDE_CORES, machine_notes
from loadgen.types import BusyProcess, ClientCheck, MachineLoad, WorkerRun

pytestmark = pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="reads Linux's /proc")

BUSY = "import sys, time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n" \
       "print('done', flush=True)\nsys.stdin.read()\n"


def test_a_process_outside_the_run_is_counted_and_named_but_the_runs_own_are_not() -> None:
    """The busy child is someone else's work when the run's own processes are not above it, and the run's own
    when they are: the same snapshots, told apart only by the roots."""
    before = snapshot()
    busy = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout is not None and busy.stdout.readline() == "done\n"
        after = snapshot()
    finally:
        busy.kill()
        busy.wait()
    assert before is not None and after is not None
    outside = load_between(before, after, own_roots=[])
    ours = load_between(before, after, own_roots=[os.getpid()])
    named = {p.pid: p for p in outside.busiest}
    assert busy.pid in named and named[busy.pid].name.startswith("python")
    assert named[busy.pid].cpu_s == pytest.approx(0.6, abs=0.15)
    assert busy.pid not in {p.pid for p in ours.busiest}
    assert outside.others_cpu_s - ours.others_cpu_s == pytest.approx(0.6, abs=0.2)
    assert ours.wall_s == pytest.approx(outside.wall_s) and ours.wall_s > 0.5


def test_descendants_follow_every_generation_from_the_roots() -> None:
    before = snapshot()
    assert before is not None
    family = descendants(before.processes, [1])
    assert os.getpid() in family  # everything descends from init
    assert descendants(before.processes, [os.getpid()]) >= {os.getpid()}
    assert descendants(before.processes, [-5]) == set()


def test_outside_is_the_machines_busy_time_less_the_runs_own_processes_and_its_workers_here() -> None:
    """Worked by hand: 10 s busy in all; the run (bench and its engine) 3 + 2 s, a Ray actor of this host (not our
    child) 1 s, or when gone its own measure, 0.25 of a core over 4 s; what is left, 4 s, is outside, and stress
    is the one named."""
    def times(pid: int, parent: int, name: str, cpu_s: float) -> ProcessTimes:
        return ProcessTimes(pid, parent, name, cpu_s)

    before = MachineSnapshot(0.0, busy_s=100.0, steal_s=1.0, processes={
        1: times(1, 0, "init", 1.0), 10: times(10, 1, "bench", 5.0), 11: times(11, 10, "engine", 2.0),
        20: times(20, 1, "stress", 0.0)})
    after = MachineSnapshot(10.0, busy_s=110.0, steal_s=1.5, processes={
        1: times(1, 0, "init", 1.0), 10: times(10, 1, "bench", 8.0), 11: times(11, 10, "engine", 4.0),
        20: times(20, 1, "stress", 2.0), 30: times(30, 1, "ray::Worker", 1.0)})
    check = ClientCheck(0.0, 0.0, 0.0, client_cpu_fraction=0.25)
    actor = WorkerRun(worker=0, host=socket.gethostname(), pid=30, users=1, num_records=1, client=check,
                      clock_offset_ms=0.0, clock_uncertainty_ms=0.0, start_s=0.0, wall_s=4.0)
    elsewhere = replace(actor, host="another-node", pid=31)
    load = load_between(before, after, [10], [actor, elsewhere])
    assert load == MachineLoad(wall_s=10.0, others_cpu_s=4.0, steal_s=0.5, busiest=[BusyProcess(20, "stress", 2.0)])
    assert load.others_cores == 0.4 and load.steal_cores == 0.05
    gone = replace(after, processes={pid: p for pid, p in after.processes.items() if pid != 30})
    assert load_between(before, gone, [10], [actor]).others_cpu_s == 4.0  # its own measure: 0.25 x 4 s


def test_the_listener_of_a_port_is_found() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        assert listening_pid(port) == os.getpid()
    finally:
        server.close()
    assert listening_pid(port) is None


def test_a_busy_machine_is_said_above_a_quarter_of_a_core_only() -> None:
    quiet = MachineLoad(wall_s=10.0, others_cpu_s=MAX_OUTSIDE_CORES * 10 - 0.1, steal_s=0.0)
    busy = MachineLoad(wall_s=10.0, others_cpu_s=8.6, steal_s=3.1, busiest=[BusyProcess(4242, "stress", 8.4)])
    assert machine_notes(quiet) == [] and machine_notes(None) == []
    notes = machine_notes(busy)
    assert len(notes) == 2
    assert "0.86 of a core" in notes[0] and "stress (pid 4242) 0.84" in notes[0]
    assert "0.31 of a core (steal time)" in notes[1]
    assert MachineLoad.from_json({"wall_s": 10.0, "others_cpu_s": 8.6, "steal_s": 3.1,
                                  "busiest": [{"pid": 4242, "name": "stress", "cpu_s": 8.4}]}) == busy
