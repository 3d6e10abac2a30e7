"""A synthetic agent workload (`AgentWorkload`) -> sessions, seeded: the same seed draws the same sessions.

A session's main agent sends `steps` calls. Call 1 is the shared system and tools prompt and the task;
call k+1 is call k's prompt, its answer and a tool's result. Since each call's context extends the one
before, block i of an agent's context is block i in every later call (its hash id is i), and only the
last, partial block of a call is completed by the next one. A subagent is drawn after a step with the
workload's probability: a fresh context (the shared prompt and a task of its own), its own steps, and the
parent's next call waits for it.
"""

from __future__ import annotations

import math

import numpy as np

from loadgen.sessions.model import Agent, Call, SessionSet, SessionTrace
from loadgen.workload import AgentWorkload, LengthDistribution

BLOCK_TOKENS = 64


def draw_sessions(workload: AgentWorkload, seed: int) -> SessionSet:
    rng = np.random.default_rng([seed, 7])
    sessions = tuple(_session(workload, rng, number) for number in range(1, workload.sessions + 1))
    digest = f"agent:{seed}:{workload.model_dump_json()}"
    return SessionSet(None, "agent", digest, sessions)


def _session(workload: AgentWorkload, rng: np.random.Generator, number: int) -> SessionTrace:
    main = _agent(workload, rng, "main", _one(workload.steps, rng), allow_subagents=True)
    session_id = f"agent-{number:04d}"
    return SessionTrace(session_id, f"synthetic session {number}", main, BLOCK_TOKENS, workload.shared_prefix_tokens)


def _agent(workload: AgentWorkload, rng: np.random.Generator, agent_id: str, num_steps: int,
           allow_subagents: bool) -> Agent:
    shared = workload.shared_prefix_tokens
    context = _one(workload.task_tokens, rng)
    items: list[Call | Agent] = []
    num_subagents = 0
    for step in range(1, num_steps + 1):
        output = _one(workload.output_tokens, rng)
        think_s = 0.0 if step == 1 else _one(workload.tool_wait_ms, rng) / 1000
        items.append(Call(shared + context, output, tuple(range(math.ceil(context / BLOCK_TOKENS))),
                          think_s=think_s))
        context += output + _one(workload.tool_result_tokens, rng)
        if allow_subagents and step < num_steps and rng.random() < workload.subagent_probability:
            num_subagents += 1
            sub = _agent(workload, rng, f"{agent_id}.sub{num_subagents}", _one(workload.subagent_steps, rng), False)
            items.append(Agent(sub.agent_id, sub.items, joins_next_call=True))
    return Agent(agent_id, tuple(items))


def _one(lengths: LengthDistribution, rng: np.random.Generator) -> int:
    return int(lengths.sample(rng, 1)[0])
