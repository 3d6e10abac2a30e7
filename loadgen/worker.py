"""One client process's part of a level split across several: the worker side.

The driver (`loadgen.pool`) starts a worker with a `WorkerJob` (its share of the users, its warm-up
requests), feeds it requests as it goes, names the instant the measured part starts (on the worker's
own clock) and drains its records every few tens of milliseconds. The worker runs the ordinary runner
(`loadgen.runner`) on its share, in a thread with an event loop of its own, so the driver's calls (over a
pipe here, Ray's on a cluster) never wait on the level, nor the level on them.

`main` is a worker as a local process (started as `python -c "from loadgen.worker import main; main()"`,
so the module keeps its own name and its pickles say so): length-prefixed pickles on stdin and stdout,
one answer to each call, and a parent-death signal so it never outlives the driver.
"""

from __future__ import annotations

import asyncio
import collections
import os
import pickle
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from loadgen.arrivals import Level
from loadgen.client import ClientOptions
from loadgen.runner import LevelBounds, LevelContext, LevelRun, LevelShare, run_level
from loadgen.types import RequestRecord, RequestSpec

SPIN_BEFORE_START_S = 0.002  # the last moments before the start are waited in passes of the loop, not a timer
CALL_TIMEOUT_S = 30.0  # the driver's wait for one answer
START_TIMEOUT_S = 120.0  # for a worker to start (a Ray actor may wait for its node to start a process)
State = Literal["idle", "warming", "ready", "measuring", "done", "failed"]
# What the driver feeds: closed loop a conversation (a list of turns), open loop (send time, request).
FedItem = list[RequestSpec] | tuple[float, RequestSpec]
# One exchange's arguments: the items fed, whether the stream has ended, how far the schedule is dealt out.
Feed = tuple[list[FedItem], bool, float | None]


class WorkerFailed(RuntimeError):
    """A client worker died or failed mid-level; the message names it and why."""


@dataclass(frozen=True)
class WorkerJob:
    worker: int
    run_id: str
    engine: str
    level: Level  # the whole level: its label goes on every record
    share: LevelShare
    options: ClientOptions
    bounds: LevelBounds
    warmup: list[RequestSpec]
    keep_text: bool = False
    read_answers: bool = False


@dataclass
class Drained:
    """What a worker holds for the driver since the last drain."""

    records: list[RequestRecord]
    taken: int  # items taken from what was fed, since the start
    state: State
    level_run: LevelRun | None = None
    error: str | None = None
    starved_s: float = 0.0


@dataclass(frozen=True)
class WorkerInfo:
    host: str
    pid: int
    nice: int = 0  # its scheduling priority: Ray starts its workers at 15 (RAY_worker_niceness)


class FedRequests:
    """A level's requests as the driver feeds them (`loadgen.runner.LevelRequests`); `add` runs on the loop.

    A user that finds nothing fed waits, and the wait counts as starved once measuring has begun (closed
    loop), or once the worker's clock is past the schedule the driver has dealt out so far (open loop)."""

    def __init__(self) -> None:
        self.items: collections.deque[FedItem] = collections.deque()
        self.ended = False
        self.horizon_s: float | None = None  # open loop: the schedule is dealt out up to here
        self.taken = 0
        self.starved_s = 0.0
        self.origin: float | None = None  # the measured part's start, once known
        self._wake = asyncio.Event()
        self._num_waiting = 0  # users waiting now: starved time is counted once, however many wait
        self._waiting_since = 0.0
        self._horizon_then: float | None = None  # the horizon when the first of them began to wait

    def add(self, items: list[FedItem], ended: bool, horizon_s: float | None) -> None:
        self.items.extend(items)
        self.ended = self.ended or ended
        self.horizon_s = horizon_s
        self._wake.set()

    async def _next(self) -> FedItem | None:
        while not self.items:
            if self.ended:
                return None
            self._wake.clear()
            if self._num_waiting == 0:
                self._waiting_since, self._horizon_then = time.perf_counter(), self.horizon_s
            self._num_waiting += 1
            try:
                await self._wake.wait()
            finally:
                self._num_waiting -= 1
                if self._num_waiting == 0:
                    self.starved_s += self._starved_part(self._waiting_since, time.perf_counter())
        self.taken += 1
        return self.items.popleft()

    def _starved_part(self, start: float, end: float) -> float:
        """Of a wait, the part after measuring began (open loop: after the schedule dealt when it began)."""
        if self.origin is None:
            return 0.0
        since = self.origin if self._horizon_then is None else self.origin + self._horizon_then
        return max(0.0, end - max(start, since))

    async def conversation(self) -> list[RequestSpec] | None:
        item = await self._next()
        return item if isinstance(item, list) else None

    async def arrivals(self) -> AsyncIterator[tuple[float, RequestSpec | None]]:
        while isinstance(item := await self._next(), tuple):
            yield item

    def take(self) -> RequestSpec | None:
        return None  # every fed arrival carries its request


class _Collected:
    """The writer a worker's runner writes to: records held until the driver drains them."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.records: list[RequestRecord] = []

    def write(self, record: RequestRecord) -> None:
        with self.lock:
            self.records.append(record)


@dataclass
class WorkerCore:
    """The worker's side of every call; each may come from any thread."""

    state: State = "idle"
    error: str | None = None
    level_run: LevelRun | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def info(self) -> WorkerInfo:
        return WorkerInfo(socket.gethostname(), os.getpid(), os.nice(0))

    def clock(self) -> float:
        return time.perf_counter()

    def start(self, job: WorkerJob) -> None:
        if self.state != "idle":
            raise RuntimeError(f"worker {job.worker} was already started")
        self.loop = _new_event_loop()
        self.fed = FedRequests()
        self.begin: asyncio.Future[float] = self.loop.create_future()
        self.collected = _Collected(self.lock)
        self.state = "warming"
        self.thread = threading.Thread(target=self._run, args=(job,), name=f"worker-{job.worker}", daemon=True)
        self.thread.start()

    def exchange(self, items: list[FedItem], ended: bool = False, horizon_s: float | None = None) -> Drained:
        """Take what the driver feeds, and hand over what was measured since the last call."""
        if items or ended or horizon_s is not None:  # open loop: the horizon moves on even with nothing new
            self._on_loop(self.fed.add, items, ended, horizon_s)
        return self.drain()

    def go(self, origin: float) -> None:
        """Start measuring at `origin` on this worker's clock (perf_counter)."""
        self._on_loop(self._begin_at, origin)

    def _begin_at(self, origin: float) -> None:
        if not self.begin.done():
            self.begin.set_result(origin)

    def drain(self) -> Drained:
        with self.lock:
            records, self.collected.records = self.collected.records, []
            return Drained(records, self.fed.taken, self.state, self.level_run, self.error, self.fed.starved_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel the level and wait for it to end (its records so far stay to be drained)."""
        self._on_loop(lambda: [task.cancel() for task in asyncio.all_tasks(self.loop)])
        if self.state != "idle":
            self.thread.join(timeout_s)

    def _on_loop(self, callback: Any, *args: Any) -> None:
        """Run `callback` on the level's loop; once the level has ended there is nothing left to tell it."""
        if self.state in ("idle", "done", "failed"):
            return
        try:
            self.loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop closed meanwhile: the level just ended
            pass

    def _run(self, job: WorkerJob) -> None:
        ctx = LevelContext(job.run_id, job.engine, job.level, job.options, self.collected,  # type: ignore[arg-type]
                           keep_text=job.keep_text, read_answers=job.read_answers, worker=job.worker, share=job.share,
                           start_measuring=self._wait_for_start)
        try:
            level_run = self.loop.run_until_complete(run_level(ctx, job.bounds, self.fed, iter(job.warmup)))
            with self.lock:
                self.level_run, self.state = level_run, "done"
        except BaseException as exc:  # noqa: BLE001 - whatever ends the level is the driver's to hear of
            with self.lock:
                self.error = "".join(traceback.format_exception_only(type(exc), exc)).strip() or type(exc).__name__
                self.state = "failed"
        finally:
            self.loop.close()

    async def _wait_for_start(self) -> float:
        self.state = "ready"
        origin = await self.begin
        while (left := origin - time.perf_counter()) > SPIN_BEFORE_START_S:
            await asyncio.sleep(left - SPIN_BEFORE_START_S)
        while time.perf_counter() < origin:
            await asyncio.sleep(0)
        self.fed.origin = origin
        self.state = "measuring"
        return origin


# The calls a worker answers: WorkerCore's public methods (the driver's side: `loadgen.worker_proxy.Workers`).
CALLS = frozenset(name for name, value in vars(WorkerCore).items() if callable(value) and not name.startswith("_"))


def answer(core: WorkerCore, name: str, args: tuple[Any, ...]) -> Any:
    """The worker's answer to the call `name(*args)`; a name that is not one of its calls is refused."""
    if name not in CALLS:
        raise AttributeError(f"a client worker answers {', '.join(sorted(CALLS))}; not {name!r}")
    return getattr(core, name)(*args)


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


# --- a worker as a local process ---------------------------------------------------------------------------

_FRAME = struct.Struct("!I")


def write_frame(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_FRAME.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next message, or EOFError when the other side is gone."""
    head = _read_exactly(stream, _FRAME.size)
    return pickle.loads(_read_exactly(stream, _FRAME.unpack(head)[0]))


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError("the other side closed the pipe")
        data += chunk
    return data


def serve(calls: IO[bytes], answers: IO[bytes]) -> None:
    """Answer the driver's calls, one by one, until it closes the pipe."""
    core = WorkerCore()
    write_frame(answers, ("ok", core.info()))
    while True:
        try:
            method, args = read_frame(calls)
        except EOFError:
            return
        try:
            write_frame(answers, ("ok", answer(core, method, args)))
        except Exception as exc:  # noqa: BLE001 - said to the driver, which decides
            write_frame(answers, ("error", f"{type(exc).__name__}: {exc}"))


def main() -> None:
    from common.processes import tie_to_parent

    tie_to_parent(int(sys.argv[1]) if len(sys.argv) > 1 else None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the driver stops its workers
    calls, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the answers
    serve(calls, answers)
