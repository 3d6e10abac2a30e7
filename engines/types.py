"""What every engine launcher hands back: where to send requests, and what is running there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server. `api_key_env` is the NAME of the variable holding the key; the key's
    value is read when requests are sent and never stored."""

    base_url: str
    model: str
    api_key_env: str | None = None

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
