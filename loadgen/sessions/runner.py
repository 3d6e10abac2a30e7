"""One level of agent sessions: `--concurrency N` keeps N sessions alive (each user replays one session
after another), `--rate R` starts R sessions a second (Poisson, or gamma with a burstiness), each running
its calls by the replay rules (`loadgen.sessions.schedule`).

The level ends when its duration is up, its request budget is spent, or `--sessions K` sessions have
completed: no call starts after that, calls in flight finish, and the sessions they belong to are cut
(their records stay; a cut session is not a completed one). A failed call ends its session. A call longer
than the model's context is not sent: it is recorded as failed (`context_overflow`) and ends its session,
as the server's refusal would.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass

from loadgen.arrivals import arrival_offsets
from loadgen.client import Session, send_request
from loadgen.runner import TIMER_SLACK_S, DrivenLevel, LevelBounds, LevelContext, LevelTasks, _finish, _spin_until
from loadgen.sessions.prompts import AgentPrompts
from loadgen.sessions.schedule import AgentPlan, Step
from loadgen.sessions.stream import SessionRun, SessionStream
from loadgen.types import RequestSpec, SessionPlace


@dataclass
class LevelState:
    """What every session of a level shares: the level's end, its budgets, its request ids."""

    ctx: LevelContext
    bounds: LevelBounds
    stream: SessionStream
    http: Session
    num_sent: int = 0
    num_completed: int = 0
    is_over: bool = False

    def over(self) -> bool:
        """Whether no call may start any more (checked before each one)."""
        bounds = self.bounds
        if bounds.duration_s is not None and self.ctx.clock() >= bounds.duration_s:
            self.is_over = True
        if bounds.max_requests is not None and self.num_sent >= bounds.max_requests:
            self.is_over = True
        return self.is_over

    def completed(self) -> None:
        self.num_completed += 1
        if self.bounds.max_sessions is not None and self.num_completed >= self.bounds.max_sessions:
            self.is_over = True

    async def wait(self, seconds: float) -> bool:
        """Sleep `seconds`, or until the level's end; False when the level ended meanwhile."""
        if seconds > 0:
            end = self.bounds.duration_s
            await asyncio.sleep(seconds if end is None else max(0.0, min(seconds, end - self.ctx.clock())))
        return not self.over()


@dataclass
class SessionLevel(DrivenLevel):
    """A level of agent sessions, taken from the run's stream."""

    stream: SessionStream

    async def drive(self, ctx: LevelContext, http: Session, bounds: LevelBounds) -> None:
        state = LevelState(ctx, bounds, self.stream, http)
        if ctx.level.kind == "concurrency":
            await _sessions_alive(state, ctx.num_users)
        else:
            await _sessions_arriving(state)


async def _sessions_alive(state: LevelState, num_users: int) -> None:
    async def user(index: int) -> None:
        while not state.over():
            await run_session(state, state.stream.next(), index)

    await asyncio.gather(*(user(i) for i in range(num_users)))


async def _sessions_arriving(state: LevelState) -> None:
    ctx, level = state.ctx, state.ctx.level
    cap = asyncio.Semaphore(ctx.max_concurrency) if ctx.max_concurrency else None
    tasks = LevelTasks()

    async def one(run: SessionRun, scheduled_s: float, index: int) -> None:
        await _spin_until(ctx, scheduled_s)
        if cap is None:
            await run_session(state, run, index, scheduled_s)
            return
        async with cap:
            await run_session(state, run, index, scheduled_s)

    try:
        offsets = arrival_offsets(level.value, level.burstiness, seed=int(level.value * 1000) + 23)
        for index, offset in enumerate(offsets):
            if state.bounds.duration_s is not None and offset > state.bounds.duration_s:
                break
            if not await state.wait(offset - ctx.clock() - TIMER_SLACK_S):
                break
            tasks.start(one(state.stream.next(), offset, index))
        await tasks.wait_all()
    finally:
        tasks.cancel()


async def run_session(state: LevelState, run: SessionRun, user: int, scheduled_s: float | None = None) -> None:
    """Replay one session; it counts as completed when every call it holds was answered."""
    if state.over():
        return
    calls = _Calls(state, run, user, scheduled_s)
    if await calls.agent(run.plan) and calls.num_ok == run.trace.num_requests:
        state.completed()


class _Calls:
    """The calls of one session being replayed."""

    def __init__(self, state: LevelState, run: SessionRun, user: int, scheduled_s: float | None) -> None:
        self.state, self.run, self.user, self.scheduled_s = state, run, user, scheduled_s
        self.num_ok = 0

    async def agent(self, plan: AgentPlan) -> bool:
        """Run an agent and its subagents; False when one of its calls failed or the level ended first."""
        state = self.state
        prompts = self.run.prompts_for(plan.agent_id, state.stream.words)
        subagents: dict[int, asyncio.Task[bool]] = {}

        def start(indices: tuple[int, ...]) -> None:
            for i in indices:
                subagents[i] = asyncio.create_task(self.agent(plan.subagents[i]))

        try:
            if not await state.wait(plan.delay_s):
                return False
            start(plan.starts_first)
            for step in plan.steps:
                joined = [await subagents.pop(i) for i in step.joins if i in subagents]
                if not all(joined) or not await state.wait(step.think_s) or not await self.send(plan, step, prompts):
                    return False
                start(step.starts)
            return all(await asyncio.gather(*subagents.values()))
        finally:
            for task in subagents.values():
                task.cancel()

    async def send(self, plan: AgentPlan, step: Step, prompts: AgentPrompts) -> bool:
        state, ctx, trace, call = self.state, self.state.ctx, self.run.trace, step.call
        shared = trace.shared_prefix_tokens
        text, implied = prompts.prompt(call, step.step, call.input_tokens - shared)
        if shared:
            implied += shared if state.stream.shared_sent else 0
            state.stream.shared_sent = True
        place = SessionPlace(self.run.key, plan.agent_id, step.step, trace.num_requests, implied)
        spec = RequestSpec(
            request_id=state.stream.new_request_id(), api="chat", prompt=text, max_tokens=call.output_tokens,
            system_prompt=state.stream.shared_prompt(shared) if shared else None, input_tokens_target=call.input_tokens,
            prompt_sha256=hashlib.sha256(text.encode()).hexdigest()[:16], session=place)
        state.num_sent += 1
        first = self.scheduled_s if plan.agent_id == "main" and step.step == 1 else None
        record = ctx.new_record(spec, user=self.user, scheduled_s=first)
        limit = state.stream.max_model_len
        if limit is not None and call.input_tokens + call.output_tokens > limit:
            record.send_s = record.end_s = ctx.clock()
            record.error_kind = "context_overflow"
            record.error_message = (f"{call.input_tokens} input and {call.output_tokens} output tokens need more than "
                                    f"the model's context of {limit}: not sent")
            ctx.keep(record)
            return False
        await ctx.start_gate.turn()
        record = await send_request(state.http, spec, ctx.options, record, ctx.clock, ctx.keep_text)
        await _finish(ctx, record)
        self.num_ok += record.ok
        return record.ok
