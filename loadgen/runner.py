"""One level of a sweep: warm-up, the measured requests, the client's check on itself.

Warm-up requests open the level's connections before the measured window, so connection set-up never
lands in a TTFT; they are written with `is_warmup` and left out of every metric. A level ends when
its duration is up or its request budget is spent (whichever comes first), or a trace's requests are all
sent; requests in flight then finish. Every record is written the moment its request ends, with lengths,
timings and a hash of the prompt, and the text itself only when `keep_text` asks for it.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import hashlib
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from loadgen.arrivals import Level, arrival_offsets
from loadgen.client import ClientOptions, Session, open_session, send_request
from loadgen.network import ConnectProbe, probe_connect
from loadgen.quality.graders import judge
from loadgen.recorder import JsonlWriter
from loadgen.structured import Structure, ToolCall
from loadgen.structured import judge as judge_structure
from loadgen.types import ClientCheck, MachineLoad, RequestRecord, RequestSpec, WorkerRun

WARMUP_MAX_TOKENS = 8
LOOP_LAG_PERIOD_S = 0.01
STARTS_PER_LOOP_PASS = 8
TIMER_SLACK_S = 0.0012


@dataclass(frozen=True)
class LevelBounds:
    duration_s: float | None = None
    max_requests: int | None = None
    num_warmup: int | None = None  # default: one per user (closed loop) or per capped slot
    max_sessions: int | None = None  # agent sessions: the level ends when this many have completed

    def __post_init__(self) -> None:
        if self.duration_s is None and self.max_requests is None and self.max_sessions is None:
            raise ValueError("a level needs --duration or --requests (or both; agent sessions: or --sessions)")
        if self.max_sessions is not None and self.max_sessions < 1:
            raise ValueError(f"sessions must be >= 1, got {self.max_sessions}")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError(f"duration must be > 0 s, got {self.duration_s:g}")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError(f"requests must be >= 1, got {self.max_requests}")


@dataclass(frozen=True)
class LevelRun:
    level: str
    kind: str
    value: float
    started_at_unix_s: float
    wall_s: float  # the measured part, from measured_at_unix_s on (after warm-up)
    num_records: int
    num_warmup: int
    client: ClientCheck
    measured_at_unix_s: float | None = None
    network: ConnectProbe | None = None  # TCP connect and TLS handshake to the endpoint, probed first
    workers: list[WorkerRun] = field(default_factory=list)  # a level split across client processes: each one
    machine: MachineLoad | None = None  # what else this machine did while the level ran
    duration_s: float | None = None  # the --duration it was given (wall_s past it: draining requests in flight)


@dataclass(frozen=True)
class LevelShare:
    """The part of a level one of several client processes runs: its users (or cap), budget and warm-up."""

    users: int
    max_requests: int | None
    num_warmup: int
    user_offset: int  # its users are numbered from here, so user ids stay unique across the processes


class LevelRequests(Protocol):
    """Where a level's requests come from: the run's own stream (`StreamRequests`), or a driver feeding
    one worker its share (`loadgen.worker.FedRequests`)."""

    async def conversation(self) -> list[RequestSpec] | None:
        """The next conversation (a single request: a list of one); None when there are no more."""

    def arrivals(self) -> AsyncIterator[tuple[float, RequestSpec | None]]:
        """Open loop: (send time, the request or None: `take` it when it is sent)."""

    def take(self) -> RequestSpec | None:
        """The next request, taken at its send time."""


class DrivenLevel:
    """A level that sends its requests by rules of its own (agent sessions: `loadgen.sessions.runner`); the
    runner still warms up, starts the clock, watches its loop and checks the client."""

    async def drive(self, ctx: LevelContext, http: Session, bounds: LevelBounds) -> None:
        raise NotImplementedError


class StreamRequests:
    """A level's requests from an iterator: closed loop a conversation at a time, open loop on the seeded
    schedule (or a trace's own times)."""

    def __init__(self, level: Level, specs: Iterator[RequestSpec]) -> None:
        self.level, self.specs = level, specs
        self._conversations = conversations(specs)
        self._schedule: Iterator[tuple[float, RequestSpec | None]] | None = None
        self._first: tuple[float, RequestSpec | None] | None = None

    async def conversation(self) -> list[RequestSpec] | None:
        return next(self._conversations, None)

    def prime(self) -> None:
        """Open loop: take the first arrival before the level's clock starts, so what building it costs once (a
        trace's first prompt, the first random generator numpy makes) is not a late first send."""
        self._schedule = schedule(self.level, self.specs)
        self._first = next(self._schedule, None)

    async def arrivals(self) -> AsyncIterator[tuple[float, RequestSpec | None]]:
        items = self._schedule if self._schedule is not None else schedule(self.level, self.specs)
        if self._first is not None:
            yield self._first
        for item in items:
            yield item

    def take(self) -> RequestSpec | None:
        return next(self.specs, None)


class StartGate:
    """Lets at most `per_pass` requests start per pass of the event loop; the others wait their turn, in
    order, a pass or a few later. Starting a request costs the client ~0.1 ms, and between passes the
    loop reads its sockets: when 256 users finish together, starting all their next requests in one pass
    would leave every chunk arriving meanwhile unread (and stamped late) for 25 ms."""

    def __init__(self, per_pass: int = STARTS_PER_LOOP_PASS) -> None:
        self.per_pass = per_pass
        self.started = 0  # in this pass
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self.next_pass_armed = False

    async def turn(self) -> None:
        if self.started < self.per_pass and not self.waiting:
            self.started += 1
            self._arm_next_pass()
            return
        waiter = asyncio.get_running_loop().create_future()
        self.waiting.append(waiter)
        self._arm_next_pass()
        await waiter

    def _arm_next_pass(self) -> None:
        if not self.next_pass_armed:
            self.next_pass_armed = True
            asyncio.get_running_loop().call_soon(self._next_pass)

    def _next_pass(self) -> None:
        self.next_pass_armed = False
        self.started = 0
        while self.waiting and self.started < self.per_pass:
            waiter = self.waiting.popleft()
            if not waiter.done():  # a cancelled user leaves a cancelled future behind
                self.started += 1
                waiter.set_result(None)
        if self.waiting or self.started:
            self._arm_next_pass()


class SpinTime:
    """The wall time during which at least one request waited in passes of the event loop."""

    def __init__(self) -> None:
        self.active = 0
        self.since = 0.0
        self.total_s = 0.0

    def begin(self) -> None:
        if self.active == 0:
            self.since = time.perf_counter()
        self.active += 1

    def end(self) -> None:
        self.active -= 1
        if self.active == 0:
            self.total_s += time.perf_counter() - self.since


@dataclass
class LevelContext:
    """What every request of a level needs: identity, clock, output, progress callback."""

    run_id: str
    engine: str
    level: Level
    options: ClientOptions
    writer: JsonlWriter
    on_record: Callable[[RequestRecord], None] | None = None
    keep_text: bool = False  # store the prompt and the answer in each record (for debugging only)
    read_answers: bool = False  # read every answer to fingerprint it (answer_sha256), the text not kept
    clock_origin: float = 0.0
    start_gate: StartGate = field(default_factory=StartGate)
    num_written: int = 0
    waiting: SpinTime = field(default_factory=SpinTime)
    worker: int | None = None  # which client process, when a level is split across several
    share: LevelShare | None = None  # that process's part of the level
    # After warm-up: waits for the measured part's start and returns it (a perf_counter value); by default now.
    # Workers of one level start together at an instant the driver chooses.
    start_measuring: Callable[[], Awaitable[float]] | None = None

    def clock(self) -> float:
        return time.perf_counter() - self.clock_origin

    @property
    def num_users(self) -> int:
        return self.share.users if self.share is not None else self.level.num_users

    @property
    def max_concurrency(self) -> int | None:
        """Open loop: the cap on requests in flight from this process."""
        if self.share is not None:
            return self.share.users or None
        return self.level.max_concurrency

    def new_record(self, spec: RequestSpec, **fields: object) -> RequestRecord:
        if spec.grading is not None:
            fields["category"] = spec.grading.category
        if spec.session is not None:
            place = spec.session
            fields.update(session_id=place.session_id, agent=place.agent, step=place.step,
                          session_requests=place.session_requests, implied_cached_tokens=place.implied_cached_tokens)
        return RequestRecord(
            run_id=self.run_id, engine=self.engine, level=self.level.label, request_id=spec.request_id,
            send_s=0.0, conversation_id=spec.conversation_id, turn=spec.turn, dataset_index=spec.dataset_index,
            prompt_sha256=spec.prompt_sha256, prompt_text=spec.prompt if self.keep_text else None,
            worker=self.worker, adapter=spec.adapter, **fields,  # type: ignore[arg-type]
        )

    def reads_answer(self, spec: RequestSpec) -> bool:
        """Whether the answer's text is read: kept, fingerprinted, graded, judged for its shape, or the next turn's
        history."""
        return (self.keep_text or self.read_answers or spec.turn is not None or spec.grading is not None
                or spec.structure is not None)

    def keep(self, record: RequestRecord) -> None:
        if record.ok and record.output_text is not None:
            record.answer_sha256 = answer_sha256(record.output_text)
        if not self.keep_text:
            record.output_text = record.output_tool_calls = None  # read to judge or go on, never written
        self.writer.write(record)
        self.num_written += 1
        if self.on_record is not None:
            self.on_record(record)


async def run_level(
    ctx: LevelContext, bounds: LevelBounds, specs: Iterator[RequestSpec] | LevelRequests | DrivenLevel,
    warmup_specs: Iterator[RequestSpec]
) -> LevelRun:
    level = ctx.level
    requests = StreamRequests(level, specs) if isinstance(specs, Iterator) else specs
    started_at = time.time()
    network = await probe_connect(ctx.options.base_url)
    async with open_session(ctx.options) as session:
        ctx.clock_origin = time.perf_counter()
        num_warmup = await _warm_up(ctx, session, bounds, warmup_specs)
        if isinstance(requests, StreamRequests) and level.kind != "concurrency":
            requests.prime()
        with _quiet_garbage_collector():
            ctx.clock_origin = await ctx.start_measuring() if ctx.start_measuring else time.perf_counter()
            measured_at = time.time() - (time.perf_counter() - ctx.clock_origin)
            lags: list[float] = []
            monitor = asyncio.create_task(_watch_loop_lag(lags))
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            try:
                if isinstance(requests, DrivenLevel):
                    await requests.drive(ctx, session, bounds)
                elif level.kind == "concurrency":
                    await _closed_loop(ctx, session, bounds, requests)
                else:
                    await _open_loop(ctx, session, bounds, requests)
            finally:
                monitor.cancel()
                wall_s = time.perf_counter() - wall_start
                cpu_s = time.process_time() - cpu_start
    return LevelRun(
        level=level.label, kind=level.kind, value=level.value, started_at_unix_s=started_at, wall_s=wall_s,
        num_records=ctx.num_written - num_warmup, num_warmup=num_warmup,
        client=_client_check(lags, cpu_s, wall_s, ctx.waiting.total_s), measured_at_unix_s=measured_at,
        network=network, duration_s=bounds.duration_s,
    )


async def _warm_up(
    ctx: LevelContext, session: Session, bounds: LevelBounds, specs: Iterator[RequestSpec]
) -> int:
    level = ctx.level
    default = ctx.num_users if level.kind == "concurrency" else (ctx.max_concurrency or 8)
    count = default if bounds.num_warmup is None else bounds.num_warmup
    count = ctx.share.num_warmup if ctx.share is not None else count

    async def one(spec: RequestSpec) -> None:
        short = RequestSpec(**{**spec.__dict__, "max_tokens": min(spec.max_tokens, WARMUP_MAX_TOKENS)})
        record = ctx.new_record(short, is_warmup=True)
        ctx.keep(await send_request(session, short, ctx.options, record, ctx.clock))

    await asyncio.gather(*(one(spec) for spec in itertools.islice(specs, count)))
    return count


async def _closed_loop(
    ctx: LevelContext, session: Session, bounds: LevelBounds, requests: LevelRequests
) -> None:
    max_requests = ctx.share.max_requests if ctx.share is not None else bounds.max_requests
    budget = itertools.count() if max_requests is None else iter(range(max_requests))
    first_user = ctx.share.user_offset if ctx.share is not None else 0

    async def user(index: int) -> None:
        """Sends one request after another; in a multi-turn workload, each turn of a conversation in order,
        with the conversation so far (a failed turn ends its conversation)."""
        turns: Iterator[RequestSpec] = iter(())
        history: tuple[tuple[str, str], ...] = ()
        while _time_left(ctx, bounds) and next(budget, None) is not None:
            await ctx.start_gate.turn()
            spec = next(turns, None)
            if spec is None:
                conversation = await requests.conversation()
                if not conversation:
                    return
                turns, history = iter(conversation), ()
                spec = next(turns)
            spec = replace(spec, history=(*spec.history, *history)) if history else spec
            record = ctx.new_record(spec, user=first_user + index)
            record = graded(spec, await send_request(session, spec, ctx.options, record, ctx.clock,
                                                     keep_text=ctx.reads_answer(spec)))
            answer = record.output_text or ""
            await _finish(ctx, record)
            if spec.turn is None:
                continue
            if record.ok:
                history = (*history, ("user", spec.prompt), ("assistant", answer))
            else:
                turns = iter(())

    await asyncio.gather(*(user(i) for i in range(ctx.num_users)))


def conversations(specs: Iterator[RequestSpec]) -> Iterator[list[RequestSpec]]:
    """The turns of each conversation together; a request outside any conversation stands alone."""
    def conversation(spec: RequestSpec) -> object:
        return spec.request_id if spec.conversation_id is None else ("conversation", spec.conversation_id)

    for _, turns in itertools.groupby(specs, key=conversation):
        yield list(turns)


async def _open_loop(
    ctx: LevelContext, session: Session, bounds: LevelBounds, requests: LevelRequests
) -> None:
    cap = asyncio.Semaphore(ctx.max_concurrency) if ctx.max_concurrency else None
    tasks = LevelTasks()

    async def one(spec: RequestSpec, scheduled_s: float) -> None:
        await _spin_until(ctx, scheduled_s)
        await ctx.start_gate.turn()
        record = ctx.new_record(spec, scheduled_s=scheduled_s)
        keep_text = ctx.reads_answer(spec)
        if cap is None:
            await _finish(ctx, graded(spec, await send_request(session, spec, ctx.options, record, ctx.clock,
                                                               keep_text)))
            return
        async with cap:
            await _finish(ctx, graded(spec, await send_request(session, spec, ctx.options, record, ctx.clock,
                                                               keep_text)))

    count = 0
    try:
        async for scheduled_s, known in requests.arrivals():
            if bounds.max_requests is not None and count >= bounds.max_requests:
                break
            if bounds.duration_s is not None and scheduled_s > bounds.duration_s:
                break
            count += 1
            # The task is started a little early and waits out the rest itself: at its time it sends at once.
            await _sleep(scheduled_s - ctx.clock() - TIMER_SLACK_S)
            spec = known if known is not None else requests.take()
            if spec is None:
                break
            tasks.start(one(spec, scheduled_s))
        await tasks.wait_all()
    finally:
        tasks.cancel()


class LevelTasks:
    """The tasks an open-loop level starts as it goes: each forgotten when it ends, the rest awaited at the level's
    end, and cancelled if the level ends by an error."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def wait_all(self) -> None:
        if self.tasks:
            await asyncio.gather(*self.tasks)

    def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()


def answer_sha256(text: str) -> str:
    """An answer's fingerprint: two runs gave the same answer when these are equal (outer white space aside)."""
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()


def graded(spec: RequestSpec, record: RequestRecord) -> RequestRecord:
    """A graded line's answer judged as it ends (a failed request is not graded: it has no answer; one the grader
    could not judge, a dataset's regex out of time, is not graded either, and its record says why), and a shaped
    answer's shape (`loadgen.structured`)."""
    if spec.structure is not None and record.ok:
        _judge_shape(spec.structure, record)
    if spec.grading is not None and record.ok:
        verdict = judge(spec.grading.grader, spec.grading.accepted, record.output_text or "")
        record.correct = verdict.correct
        if verdict.note:
            record.error_message = verdict.note
    return record


def _judge_shape(structure: Structure, record: RequestRecord) -> None:
    calls = [ToolCall(call["name"], call["arguments"]) for call in record.output_tool_calls or ()]
    shape = judge_structure(structure, record.output_text or "", calls, record.finish_reason)
    record.structure_valid, record.answer_parsed, record.schema_valid = shape.valid, shape.parsed, shape.schema_valid
    record.tool_call_valid, record.num_tool_calls = shape.tool_valid, shape.num_tool_calls
    record.structure_fault, record.structure_note = shape.fault, shape.note


async def _sleep(delay_s: float) -> None:
    if delay_s > 0:
        await asyncio.sleep(delay_s)


async def _spin_until(ctx: LevelContext, due_s: float) -> None:
    """Wait for `due_s` on the level's clock in passes of the event loop (which go on reading streams). A timer
    fires up to a millisecond late (uvloop's count whole milliseconds), so only the last TIMER_SLACK_S is
    waited this way; the time spent so is kept apart from the client's CPU check."""
    if ctx.clock() >= due_s:
        return
    ctx.waiting.begin()
    try:
        while ctx.clock() < due_s:
            await asyncio.sleep(0)
    finally:
        ctx.waiting.end()


def schedule(level: Level, specs: Iterator[RequestSpec]) -> Iterator[tuple[float, RequestSpec | None]]:
    """(send time, its request): a trace's own timestamps, scaled, until the trace ends; else the seeded arrival
    process, with None for the request: it is taken from the stream only when it is sent (so a level's end
    leaves the stream where a resumed run expects it)."""
    if level.kind == "trace":
        for spec in specs:
            yield (spec.arrival_s or 0.0) * level.value, spec
        return
    for offset in arrival_offsets(level.value, level.burstiness, seed=int(level.value * 1000) + 17):
        yield offset, None


@contextmanager
def _quiet_garbage_collector() -> Iterator[None]:
    """Fewer, cheaper collections while measuring: a full collection pauses the loop, and a paused loop
    reads tokens late. Everything alive before the level is frozen out of the collector's scans."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def run_level_blocking(
    ctx: LevelContext, bounds: LevelBounds, specs: Iterator[RequestSpec] | LevelRequests | DrivenLevel,
    warmup_specs: Iterator[RequestSpec]
) -> LevelRun:
    """Run one level on a fresh event loop: uvloop's where it is installed (less overhead per streamed
    chunk, so tokens are read sooner), else asyncio's."""
    coroutine = run_level(ctx, bounds, specs, warmup_specs)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


async def _finish(ctx: LevelContext, record: RequestRecord) -> None:
    """Keep a finished request's record, after one pass of the event loop: streams that ended in the same
    instant are read first, so writing records and sending the next requests never delays their last
    tokens (with many users on identical requests, they all end together)."""
    await asyncio.sleep(0)
    ctx.keep(record)


def _time_left(ctx: LevelContext, bounds: LevelBounds) -> bool:
    return bounds.duration_s is None or ctx.clock() < bounds.duration_s


async def _watch_loop_lag(lags: list[float]) -> None:
    """Event-loop lag: how late a 10 ms sleep wakes up. A busy client wakes late and reads late."""
    while True:
        start = time.perf_counter()
        await asyncio.sleep(LOOP_LAG_PERIOD_S)
        lags.append(time.perf_counter() - start - LOOP_LAG_PERIOD_S)


def _client_check(lags: list[float], cpu_s: float, wall_s: float, waiting_s: float = 0.0) -> ClientCheck:
    lag_ms = np.array(lags or [0.0]) * 1000
    return ClientCheck(
        loop_lag_p50_ms=float(np.percentile(lag_ms, 50)),
        loop_lag_p99_ms=float(np.percentile(lag_ms, 99)),
        loop_lag_max_ms=float(lag_ms.max()),
        client_cpu_fraction=cpu_s / wall_s if wall_s > 0 else 0.0,
        waiting_fraction=min(waiting_s, wall_s) / wall_s if wall_s > 0 else 0.0,
    )
