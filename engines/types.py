"""What every engine launcher hands back: where to send requests, and what is running there; and the shape
of a launcher itself. Plain records: nothing here starts anything or speaks HTTP."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server. `api_key_env` is the NAME of the variable holding the key; the key's
    value is read when requests are sent and never stored."""

    base_url: str
    model: str
    api_key_env: str | None = None
    metrics_url: str | None = None  # the engine's /metrics, where base_url is a proxy in front of it (a UI)

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base URL must start with http:// or https://, got '{self.base_url}'")
        if not self.base_url.rstrip("/").endswith("/v1"):
            raise ValueError(f"base URL must end in /v1 (e.g. http://127.0.0.1:8000/v1), got '{self.base_url}'")


@dataclass(frozen=True)
class EngineInfo:
    """What ran: recorded in run.json so every figure can be traced to the engine that produced it."""

    name: str
    model: str
    version: str | None = None
    launched_by: str = "user"  # "user" for an endpoint someone else started
    details: dict[str, Any] = field(default_factory=dict)


# A context manager that starts an engine on entry, yields where it answers and what runs there, and stops
# whatever it started on exit, however the block is left.
RunningEngine = AbstractContextManager[tuple[Endpoint, EngineInfo]]

# What `bench` gets for an engine kind: called with the run directory (where engine.log goes).
Launcher = Callable[[Path], RunningEngine]
