"""A run's agent sessions, in order: each level's users take the next one, from the start again once all
have been taken. A session taken again is a replay of its own (`#2`, `#3`): its prompts share nothing
with its first replay, so a prefix cache can't flatter a later level.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from loadgen.datasets import PromptTokenizer
from loadgen.sessions.model import SessionSet, SessionTrace
from loadgen.sessions.prompts import AgentPrompts, block_texts, scope_key, words_for
from loadgen.sessions.schedule import DEFAULT_MAX_THINK_S, AgentPlan, plan_agent
from loadgen.types import DatasetInfo, Distribution

SHARED_PREFIX_BLOCK = 64


@dataclass(frozen=True)
class SessionRun:
    """One session to replay: the trace, its plan, and the key its records carry."""

    trace: SessionTrace
    plan: AgentPlan
    key: str  # the trace's id, with #n from its second replay on
    seed: int

    def prompts_for(self, agent_id: str, words: np.ndarray) -> AgentPrompts:
        return AgentPrompts(scope_key(self.seed, self.key, agent_id), self.trace.block_tokens, words)


@dataclass
class SessionStream:
    sessions: SessionSet
    seed: int = 0
    tokenizer: PromptTokenizer | None = None
    max_think_s: float = DEFAULT_MAX_THINK_S
    max_model_len: int | None = None  # a call longer than this is not sent: it fails as a context overflow
    taken: int = 0
    num_requests: int = 0  # request ids are the run's: unique across its levels
    _plans: dict[int, AgentPlan] = field(default_factory=dict)
    _shared: dict[int, str] = field(default_factory=dict)
    shared_sent: bool = False  # whether the shared system prompt went out once already (a cache holds it since)

    def __post_init__(self) -> None:
        self.words = words_for(self.tokenizer)

    def next(self) -> SessionRun:
        index = self.taken % len(self.sessions.sessions)
        replay = self.taken // len(self.sessions.sessions) + 1
        self.taken += 1
        trace = self.sessions.sessions[index]
        plan = self._plans.get(index) or self._plans.setdefault(index, plan_agent(trace.main, self.max_think_s))
        key = trace.session_id if replay == 1 else f"{trace.session_id}#{replay}"
        return SessionRun(trace, plan, key, self.seed)

    def new_request_id(self) -> int:
        self.num_requests += 1
        return self.num_requests - 1

    def skip(self, count: int) -> None:
        """Go on after `count` sessions taken already (a resumed run)."""
        self.taken += count

    def shared_prompt(self, num_tokens: int) -> str:
        """The shared system prompt of `num_tokens` tokens: one text for every session."""
        if num_tokens not in self._shared:
            blocks = -(-num_tokens // SHARED_PREFIX_BLOCK)
            texts = block_texts(scope_key(self.seed, "shared prefix"), list(range(blocks)), SHARED_PREFIX_BLOCK,
                                self.words)
            self._shared[num_tokens] = " ".join(" ".join(texts).split(" ")[:num_tokens])
        return self._shared[num_tokens]


def describe_sessions(sessions: SessionSet) -> DatasetInfo:
    """What the report states about the sessions: which file (its sha256, never its text), how many sessions and
    calls, and the calls' lengths."""
    calls = [call for s in sessions.sessions for agent in s.main.agents() for call in agent.calls]
    subagents = sum(len(s.main.agents()) - 1 for s in sessions.sessions)
    name = sessions.path.name if sessions.path is not None else "synthetic agent sessions"
    return DatasetInfo(
        name=name, path=str(sessions.path or ""), sha256=sessions.sha256, format=sessions.format,
        num_requests=len(calls), num_entries=len(sessions.sessions), num_in_file=len(sessions.sessions),
        input_tokens=Distribution.of(np.asarray([c.input_tokens for c in calls])),
        output_tokens=Distribution.of(np.asarray([c.output_tokens for c in calls])),
        lengths="from the trace" if sessions.path is not None else "drawn from the workload's distributions",
        notes=(f"{len(sessions.sessions)} sessions, {len(calls)} calls, {subagents} subagents",))
