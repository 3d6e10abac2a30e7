"""The records that flow through the load generator.

`RequestSpec` is what to send; `RequestRecord` is what happened, as raw timestamps only. Every metric is
computed later from records (`loadgen.metrics`), so a run directory can always be re-summarized.
Times in a record are seconds on the level's monotonic clock (0 = the level's start), except
`chunk_times_s`, which are relative to the request's own send time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Api = Literal["chat", "completions"]


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: a prompt (or chat messages) and the output length to ask for."""

    request_id: int
    api: Api
    prompt: str
    max_tokens: int
    system_prompt: str | None = None
    input_tokens_target: int | None = None
    conversation_id: int | None = None
    turn: int | None = None
    history: tuple[tuple[str, str], ...] = ()  # earlier turns of the conversation: (role, content)

    def messages(self) -> list[dict[str, str]]:
        head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        earlier = [{"role": role, "content": content} for role, content in self.history]
        return [*head, *earlier, {"role": "user", "content": self.prompt}]

    def completion_prompt(self) -> str:
        return f"{self.system_prompt}\n\n{self.prompt}" if self.system_prompt else self.prompt


@dataclass
class RequestRecord:
    """What one request did, as measured by the client. One JSON line in `requests.jsonl`.

    `chunk_times_s[i]` is when the i-th chunk carrying generated content arrived, relative to `send_s`;
    `chunk_tokens[i]` is how many tokens that chunk carried (see `token_count_source`).
    `dispatch_s` is when the client began the request, `send_s` when its body was handed to the socket
    (the difference is the client's own send delay); `scheduled_s` is when an open-loop schedule wanted it.
    """

    run_id: str
    engine: str
    level: str
    request_id: int
    send_s: float
    dispatch_s: float | None = None
    scheduled_s: float | None = None
    user: int | None = None
    conversation_id: int | None = None
    turn: int | None = None
    is_warmup: bool = False
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    end_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    cached_tokens: int | None = None
    server_output_tokens: int | None = None
    token_count_source: str = "chunks"
    max_tokens: int | None = None
    finish_reason: str | None = None
    ok: bool = False
    error_kind: str | None = None
    error_message: str | None = None
    http_status: int | None = None
    attempts: int = 1  # > 1 when kept-alive connections turned out closed and the request was sent again
    output_text: str | None = None  # kept for multi-turn workloads only: the next turn sends it back

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_times_s[0] if self.chunk_times_s else None

    @property
    def e2e_s(self) -> float | None:
        """Send -> last generated content (a trailing usage chunk or [DONE] is not content)."""
        return self.chunk_times_s[-1] if self.chunk_times_s else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> RequestRecord:
        known = {k: v for k, v in row.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass(frozen=True)
class ClientCheck:
    """How the client itself fared during a level: a client that falls behind reads tokens late."""

    loop_lag_p50_ms: float
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    client_cpu_fraction: float  # process CPU seconds / wall seconds (1.0 = one core busy)
