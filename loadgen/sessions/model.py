"""Agent sessions as a trace holds them: each session a main agent, each agent its calls in order with the
subagents it started between them.

A call's prompt is known by its lengths and its blocks: `hash_ids[i]` names the i-th block of
`block_tokens` tokens, and two calls of one agent whose ids agree on the first k blocks sent the same
first k blocks. Ids are the agent's own: no block is shared between agents or sessions (a subagent starts
from a fresh context), except the `shared_prefix_tokens` every session of a synthetic workload starts with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Call:
    """One request of an agent."""

    input_tokens: int
    output_tokens: int  # asked as max_tokens (with ignore_eos); reasoning included
    hash_ids: tuple[int, ...] = ()
    t_s: float | None = None  # when the trace saw it sent, seconds from its session's start
    think_s: float | None = None  # the client's wait after the agent's previous answer, as recorded
    api_time_s: float | None = None  # how long the trace's server took to answer it
    reasoning_tokens: int = 0  # of output_tokens, reasoning (billed as output)


@dataclass(frozen=True)
class Agent:
    """The main agent (`agent_id` "main") or a subagent: its calls and subagents in the order listed."""

    agent_id: str
    items: tuple[Call | Agent, ...]
    t_s: float | None = None  # subagents: when the trace saw it start
    duration_s: float | None = None  # subagents: how long it ran in the trace
    delay_s: float = 0.0  # a wait before its first call, after whatever starts it
    joins_next_call: bool = False  # the parent's next call waits for it (a synthetic subagent: a tool's result)

    @property
    def calls(self) -> tuple[Call, ...]:
        return tuple(item for item in self.items if isinstance(item, Call))

    @property
    def num_requests(self) -> int:
        """Its calls and those of every subagent under it."""
        return sum(1 if isinstance(item, Call) else item.num_requests for item in self.items)

    def agents(self) -> list[Agent]:
        """Itself and every subagent under it."""
        return [self, *(a for item in self.items if isinstance(item, Agent) for a in item.agents())]


@dataclass(frozen=True)
class SessionTrace:
    session_id: str
    where: str  # the file and line (or entry) it came from, for errors
    main: Agent
    block_tokens: int = 64
    shared_prefix_tokens: int = 0  # a synthetic workload's system and tools prompt, the same in every session

    @property
    def num_requests(self) -> int:
        return self.main.num_requests


@dataclass(frozen=True)
class SessionSet:
    """A session dataset read (or a synthetic workload drawn): which file, and its sessions in order."""

    path: Path | None
    format: str  # weka, tracelab, otel or agent (synthetic)
    sha256: str
    sessions: tuple[SessionTrace, ...]

    @property
    def num_requests(self) -> int:
        return sum(s.num_requests for s in self.sessions)
