"""The servers the benchmarks measure against, each a context manager that starts it, waits until it answers
and stops it on every way out: the scripted server (the `scripted` package, whose timing is known) and
a reference engine (any command that says "ready on URL" when it serves)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def scripted_server(port: int, timing: list[str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """The scripted server in its own process on `port`, on the last core (the client takes the first), with
    `timing` its flags (default: no wait at all); stopped on leaving."""
    cores = sorted(os.sched_getaffinity(0))
    pin = ["taskset", "-c", str(cores[-1])] if len(cores) > 1 else []
    timing = timing or ["--ttft-ms", "0", "--itl-ms", "0"]
    command = [*pin, sys.executable, "-m", "scripted", "--port", str(port), *timing]
    server = subprocess.Popen(command, stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "listening on ...": it answers from now on
        yield server
    finally:
        server.terminate()
        server.wait(timeout=10)


@contextmanager
def ready_engine(command: list[str], cwd: Path | None = None, stop_timeout_s: float = 30) -> Iterator[str]:
    """An engine started by `command` (`python -m engines.reference ...`, `bench serve ...`) until the line that
    says "ready on URL"; the URL. Its output is read on and dropped, so a full pipe never stops it; one that
    ends before it is ready ends the benchmark with its exit code."""
    engine = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert engine.stdout is not None
        for line in engine.stdout:
            if "ready on" in line:
                threading.Thread(target=engine.stdout.read, daemon=True).start()
                break
        else:
            raise SystemExit(f"the engine did not start: {engine.wait()}")
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        engine.terminate()
        engine.wait(stop_timeout_s)
