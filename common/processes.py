"""Stopping a child process this process started: politely, then for sure."""

from __future__ import annotations

import subprocess

PR_SET_PDEATHSIG = 1


def terminate(process: subprocess.Popen[bytes] | subprocess.Popen[str], timeout_s: float = 5.0) -> None:
    """SIGTERM, and SIGKILL if it has not exited within `timeout_s`; always reaped."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def tie_to_parent(parent_pid: int | None) -> None:
    """Called by a child at its start: the kernel kills it when its parent dies (Linux), and it exits at once
    if the parent is already gone. Elsewhere a no-op."""
    import ctypes
    import os
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)
