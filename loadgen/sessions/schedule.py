"""The replay rules: when each call of a session is sent, relative to the others.

- An agent's calls run in order. Call i is sent when call i-1 has ended and its think time has passed: the
  trace's `think_time`, else `t_i - t_(i-1) - api_time_(i-1)` when the trace has `api_time`, else 0; never
  below 0, never above `max_think_s`.
- A subagent starts when the call listed before it ends (one listed before any call starts with its
  agent, after its own `delay_s`), and runs its calls by the same rule, beside its parent. Subagents listed
  one after another start together.
- Join: the first later call of the parent whose `t` is at or past the subagent's `t + duration` waits for
  the subagent to end, then for its own think time. An agent ends when its calls and all its subagents have.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.sessions.model import Agent, Call

DEFAULT_MAX_THINK_S = 10.0


@dataclass(frozen=True)
class Step:
    step: int  # from 1, within its agent
    call: Call
    think_s: float  # waited after the previous call ended (and after any join)
    joins: tuple[int, ...] = ()  # subagents (indices into AgentPlan.subagents) waited for before the think time
    starts: tuple[int, ...] = ()  # subagents started when this call ends


@dataclass(frozen=True)
class AgentPlan:
    agent_id: str
    steps: tuple[Step, ...]
    subagents: tuple[AgentPlan, ...] = ()
    starts_first: tuple[int, ...] = ()  # subagents listed before any call: started with the agent
    delay_s: float = 0.0  # waited before anything else, once started


def plan_agent(agent: Agent, max_think_s: float = DEFAULT_MAX_THINK_S) -> AgentPlan:
    subagents = [item for item in agent.items if isinstance(item, Agent)]
    number = {id(sub): i for i, sub in enumerate(subagents)}
    steps: list[Step] = []
    starts_first: list[int] = []
    pending: list[Agent] = []  # subagents whose join is still to be found
    previous: Call | None = None
    for item in agent.items:
        if isinstance(item, Agent):
            if steps:
                steps[-1] = _with_start(steps[-1], number[id(item)])
            else:
                starts_first.append(number[id(item)])
            pending.append(item)
            continue
        joined = [sub for sub in pending if _joins(sub, item)]
        pending = [sub for sub in pending if all(sub is not j for j in joined)]
        think = 0.0 if previous is None else _think_s(previous, item)
        steps.append(Step(len(steps) + 1, item, min(max(think, 0.0), max_think_s),
                          tuple(number[id(sub)] for sub in joined)))
        previous = item
    return AgentPlan(agent.agent_id, tuple(steps), tuple(plan_agent(sub, max_think_s) for sub in subagents),
                     tuple(starts_first), min(max(agent.delay_s, 0.0), max_think_s))


def _think_s(previous: Call, call: Call) -> float:
    if call.think_s is not None:
        return call.think_s
    if previous.api_time_s is not None and previous.t_s is not None and call.t_s is not None:
        return call.t_s - previous.t_s - previous.api_time_s
    return 0.0


def _joins(sub: Agent, call: Call) -> bool:
    if sub.joins_next_call:
        return True
    if sub.t_s is None or sub.duration_s is None or call.t_s is None:
        return False
    return call.t_s >= sub.t_s + sub.duration_s


def _with_start(step: Step, subagent: int) -> Step:
    return Step(step.step, step.call, step.think_s, step.joins, (*step.starts, subagent))
