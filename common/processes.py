"""Stopping a child process this process started: politely, then for sure."""

from __future__ import annotations

import subprocess


def terminate(process: subprocess.Popen[bytes] | subprocess.Popen[str], timeout_s: float = 5.0) -> None:
    """SIGTERM, and SIGKILL if it has not exited within `timeout_s`; always reaped."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
