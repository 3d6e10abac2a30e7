"""Nothing a command launched outlives it: the kernel's tie, the watcher, the marks and `bench clean`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engines import lifeline
from engines.launch import stop_signals_held
from tests.servers import is_running

pytestmark = pytest.mark.serial  # looks at every process of ours, the other tests' included: run alone

BENCH = [sys.executable, "-m", "bench"]


def wait_until_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(is_running(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if is_running(pid)]


def dead_owner() -> str:
    """The owner id of a process that has ended (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    owner = lifeline.owner_id(process.pid)
    process.wait()
    return owner


def test_an_owner_id_names_one_process_even_after_its_pid_is_reused() -> None:
    me = lifeline.owner_id()
    assert lifeline.is_alive(me)
    pid, start = me.split(":")
    assert not lifeline.is_alive(f"{pid}:{int(start) + 1}")  # same pid, another process
    assert not lifeline.is_alive(dead_owner())
    assert not lifeline.is_alive("not-an-owner")


# The "command": launches an engine that ignores SIGTERM and forks a child of its own, prints both pids,
# and waits to be killed.
OWNER_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from engines.launch import ProcessSpec, free_port, run_process
    port = free_port()
    code = (
        "import signal, subprocess, sys, time\\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\\n"
        "print('child', child.pid, flush=True)\\n"
        f"subprocess.Popen([sys.executable, '-m', 'scripted', '--port', '{port}'])\\n"
        "time.sleep(120)\\n"
    )
    spec = ProcessSpec("stubborn", [sys.executable, "-c", code], [f"http://127.0.0.1:{port}/health"])
    with run_process(spec, Path(sys.argv[1]) / "engine.log") as started:
        print("leader", started.pid, flush=True)
        time.sleep(120)
""")


def test_an_engine_and_its_children_die_with_a_command_killed_outright(tmp_path) -> None:
    """SIGKILL leaves the command no chance to stop anything: the kernel kills the engine it started, and the
    watcher the engine's own child (which the kernel's tie does not reach)."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER_SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[2])
    try:
        assert owner.stdout is not None
        leader = int(owner.stdout.readline().split()[1])
        log = (tmp_path / "engine.log").read_text()
        child = int(log.split("child ")[1].split()[0])
        assert is_running(leader) and is_running(child)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        assert wait_until_gone([leader, child], timeout_s=5) == []
    finally:
        owner.kill()
    assert "lifeline: the command that launched this engine died" in (tmp_path / "engine.log").read_text()


def test_a_stop_signal_during_a_stop_waits_until_the_stop_is_done() -> None:
    events: list[str] = []

    def handler(signum: int, frame: object) -> None:
        events.append(f"handled {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with stop_signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            events.append("stop finished")
        assert events == ["stop finished", "handled SIGTERM"]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_bench_clean_stops_engines_whose_command_died_and_a_sweep_warns_about_them(scripted, tmp_path) -> None:
    marks = {lifeline.OWNER_ENV: dead_owner(), lifeline.RUN_ENV: "20260101T000000Z-reference-chat"}
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env={**os.environ, **marks},
                              start_new_session=True)
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            env={**os.environ, lifeline.OWNER_ENV: lifeline.owner_id()})  # its owner lives
    try:
        scripted.set_script(ttft_ms=5, itl_ms=1)
        sweep = subprocess.run([*BENCH, "sweep", "--engine", "endpoint", "--base-url", scripted.base_url, "--model",
                                "scripted", "--concurrency", "1", "--requests", "2", "--output-tokens", "4",
                                "--no-report", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
        assert sweep.returncode == 0, sweep.stderr
        assert "engine(s) left running by a bench command that died" in sweep.stderr
        assert f"process {orphan.pid} of run 20260101T000000Z-reference-chat" in sweep.stderr
        dry = subprocess.run([*BENCH, "clean", "--dry-run"], capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0 and f"would remove process {orphan.pid}" in dry.stdout
        assert is_running(orphan.pid)
        clean = subprocess.run([*BENCH, "clean"], capture_output=True, text=True, timeout=60)
        assert clean.returncode == 0 and f"removing process {orphan.pid}" in clean.stdout
        orphan.wait(timeout=10)
        assert is_running(ours.pid), "a process whose command still runs is not a leftover"
        again = subprocess.run([*BENCH, "clean"], capture_output=True, text=True, timeout=60)
        assert "nothing left behind" in again.stdout
    finally:
        orphan.kill()
        ours.kill()


@pytest.mark.parametrize("owner_alive", [True, False])
def test_leftover_processes_are_only_those_whose_owner_is_gone(owner_alive: bool) -> None:
    owner = lifeline.owner_id() if owner_alive else dead_owner()
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                               env={**os.environ, lifeline.OWNER_ENV: owner})
    try:
        deadline = time.monotonic() + 5
        while process.pid not in lifeline.marked_processes() and time.monotonic() < deadline:
            time.sleep(0.02)  # the environment is readable once the child has exec'd
        assert lifeline.marked_processes(owner) == {process.pid: owner}
        leftover = [item.name for item in lifeline.leftover_processes()]
        assert (str(process.pid) in leftover) is not owner_alive
    finally:
        process.kill()
        process.wait()
