"""Real local servers for tests: the scripted OpenAI-compatible server, run as its own process."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx


def is_running(pid: int) -> bool:
    """Whether a process runs (a zombie waiting for its parent to reap it does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@dataclass
class ScriptedServer:
    process: subprocess.Popen[str]
    base_url: str

    def set_script(self, **changes: Any) -> None:
        """Reset the script to its defaults, then apply `changes` (see scripted.script.Script)."""
        defaults = {"ttft_ms": 100.0, "itl_ms": 20.0, "tokens_per_chunk": 1, "fault": "none", "fault_every": 1,
                    "fault_after_chunks": 3, "stall_ms": 1000.0, "model": "scripted", "itl_per_stream_ms": 0.0,
                    "max_streams": 0, "reasoning_tokens": 0, "rate_limit_per_s": 0.0, "rate_limit_burst": 1.0,
                    "prefix_cache_block_words": 0, "right_share": -1.0, "right_share_per_stream": 0.0,
                    "adapters": [], "spec_tokens": 0, "valid_share": 1.0,
                    "spec_report": "llamacpp"}
        response = httpx.put(self.base_url.removesuffix("/v1") + "/_script", json={**defaults, **changes})
        response.raise_for_status()

    def models(self) -> list[str | None]:
        """The model every completion request asked for since the last call, in order (the server's own log)."""
        response = httpx.get(self.base_url.removesuffix("/v1") + "/_models")
        response.raise_for_status()
        return response.json()["models"]

    def shapes(self) -> dict[str, int]:
        """Shaped answers given since the last call, and how many validly (the server's own count)."""
        response = httpx.get(self.base_url.removesuffix("/v1") + "/_shapes")
        response.raise_for_status()
        return response.json()

    def prompts(self) -> list[str]:
        """A hash of every prompt that arrived since the last call, in order (the server's own log)."""
        response = httpx.get(self.base_url.removesuffix("/v1") + "/_prompts")
        response.raise_for_status()
        return response.json()["prompts"]


@contextmanager
def scripted_server() -> Iterator[ScriptedServer]:
    process = subprocess.Popen(
        [sys.executable, "-m", "scripted", "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(r"(http://\S+/v1)", line)
        assert match, f"scripted server did not start: {line!r}"
        yield ScriptedServer(process, match.group(1))
    finally:
        process.terminate()
        process.wait(timeout=10)
