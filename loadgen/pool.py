"""A level split across client processes: the driver's side (`--workers N`, `--ray ADDRESS`).

    split the level (users, cap, budget, warm-up) -> start the workers (local processes, or Ray actors)
    -> match their clocks to the driver's -> each warms up its own connections -> all start measuring at
    one instant the driver names -> the driver feeds them requests from the run's one stream and drains
    their records into requests.jsonl as they arrive -> every worker's LevelRun merged into one

Closed loop: the users are split as evenly as can be, each worker's numbered on from the last one's, and
the request budget in the same proportion. Open loop: the driver deals the level's one schedule (the
seeded arrivals, or a trace's times) to the workers in turn, so together they send exactly the schedule one
process would; a cap on requests in flight is split like users. Requests fed to a worker but never sent go
back to the head of the stream for the next level.

A worker that dies or fails ends the level with `WorkerFailed` naming it; what the others still hold is
drained first, and every worker is stopped (killed if need be) on every path.
"""

from __future__ import annotations

import collections
import itertools
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from common.processes import terminate
from loadgen.arrivals import Level
from loadgen.runner import LevelBounds, LevelContext, LevelRun, LevelShare, conversations, schedule
from loadgen.types import RequestSpec, WorkerRun, worst_check
from loadgen.worker import (
    CALL_TIMEOUT_S,
    START_TIMEOUT_S,
    Drained,
    FedItem,
    Feed,
    WorkerFailed,
    WorkerJob,
    read_frame,
    write_frame,
)
from loadgen.worker_proxy import Workers

WORKER_MAIN = "from loadgen.worker import main; main()"  # a local worker process (loadgen.worker)
POLL_S = 0.05  # how often the driver feeds requests and drains records: one call to each worker
START_MARGIN_S = 0.1  # from the driver's "go" to the instant the workers start measuring
LOOKAHEAD_S = 2.0  # open loop: the schedule is dealt out this far ahead of the workers' clocks
CLOCK_PINGS = 16


@dataclass(frozen=True)
class ClientPool:
    """How a level's load is generated: in this process (1 worker), in `workers` local processes, or in
    `workers` Ray actors on the cluster at `ray_address`."""

    workers: int = 1
    ray_address: str | None = None
    log_path: Path | None = None  # local workers' stderr

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"--workers {self.workers}: expected a whole number >= 1")

    @property
    def is_split(self) -> bool:
        return self.workers > 1 or self.ray_address is not None

    @contextmanager
    def session(self) -> Iterator[None]:
        """Connected to the Ray cluster for as long as the run lasts (nothing to do for local workers)."""
        if self.ray_address is None:
            yield
            return
        from loadgen.ray_workers import connected

        with connected(self.ray_address):
            yield

    def start(self, count: int) -> Workers:
        if self.ray_address is not None:
            from loadgen.ray_workers import RayWorkers

            return RayWorkers(count)
        return LocalWorkers(count, self.log_path)


@dataclass(frozen=True)
class ClockOffset:
    offset_s: float  # the worker's clock minus the driver's
    uncertainty_s: float


@dataclass(frozen=True)
class SplitResult:
    level_run: LevelRun
    unsent: list[RequestSpec]  # fed to a worker, never sent: for the head of the stream


def split_shares(level: Level, bounds: LevelBounds, workers: int) -> list[LevelShare]:
    """Each worker's part: users (or slots of the open-loop cap), request budget (closed loop) and warm-up.
    Never more workers than users (or slots)."""
    closed = level.kind == "concurrency"
    slots = level.num_users if closed else level.max_concurrency
    count = min(workers, slots) if slots else workers
    users = _even(slots, count) if slots else [0] * count
    budgets = _even(bounds.max_requests, count) if closed and bounds.max_requests is not None else [None] * count
    default_warmup = level.num_users if closed else (level.max_concurrency or 8)
    warmups = _even(default_warmup if bounds.num_warmup is None else bounds.num_warmup, count)
    offsets = [0, *itertools.accumulate(users)][:count]
    return [LevelShare(users[i], budgets[i], warmups[i], offsets[i]) for i in range(count)]


def _even(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def run_split_level(ctx: LevelContext, bounds: LevelBounds, specs: Iterator[RequestSpec],
                    warmup_specs: Iterator[RequestSpec], pool: ClientPool) -> SplitResult:
    """Run one level across the pool's workers; records go to `ctx` (its writer and progress) as they arrive."""
    level = ctx.level
    shares = split_shares(level, bounds, pool.workers)
    started_at = time.time()
    feeder = Feeder(level, bounds, specs, shares)
    workers = pool.start(len(shares))
    drained: list[Drained] = []
    try:
        offsets = [measure_offset(workers, i) for i in range(len(shares))]
        jobs = [WorkerJob(i, ctx.run_id, ctx.engine, level, share, ctx.options, bounds,
                          list(itertools.islice(warmup_specs, share.num_warmup)), ctx.keep_text,
                          ctx.read_answers)
                for i, share in enumerate(shares)]
        workers.start(jobs)
        origin: float | None = None
        measured_at = 0.0
        taken = [0] * len(shares)
        while True:
            feeds = feeder.feeds(taken, 0.0 if origin is None else time.perf_counter() - origin)
            drained = _exchange(ctx, workers, level, feeds)
            taken = [d.taken for d in drained]
            states = {d.state for d in drained}
            if origin is None and states == {"ready"}:
                origin = time.perf_counter() + START_MARGIN_S
                measured_at = time.time() + START_MARGIN_S
                workers.go([origin + offset.offset_s for offset in offsets])
            if states == {"done"}:
                break
            time.sleep(POLL_S)
    except BaseException:
        _salvage(ctx, workers)
        raise
    finally:
        workers.close()
    feeder.taken(taken)
    runs = [d.level_run for d in drained]
    assert all(runs), "every worker reported done"
    return SplitResult(_merged(level, started_at, measured_at, runs, drained, shares, offsets, workers),  # type: ignore[arg-type]
                       feeder.unsent())  # every worker reported done, after the "go": measured_at is set


def _exchange(ctx: LevelContext, workers: Workers, level: Level, feeds: list[Feed]) -> list[Drained]:
    """Each worker fed what it is owed and drained of its records, in one call."""
    drained = workers.exchange(feeds)
    for d in drained:
        for record in d.records:
            ctx.keep(record)
    for index, d in enumerate(drained):
        if d.state == "failed":
            raise WorkerFailed(f"client worker {index} ({_where(workers, index)}) failed in {level.label}: {d.error}")
    return drained


def _salvage(ctx: LevelContext, workers: Workers) -> None:
    """A level that ends early: each worker still answering is stopped and drained, so what it measured is kept.
    Whatever goes wrong here gives way to what ended the level."""
    for index in range(len(workers.infos)):
        try:
            workers.stop(index)
            for record in workers.drain(index).records:
                ctx.keep(record)
        except Exception:  # noqa: BLE001 - a worker that can't be drained is stopped by close()
            continue


def _merged(level: Level, started_at: float, measured_at: float, runs: list[LevelRun], drained: list[Drained],
            shares: list[LevelShare], offsets: list[ClockOffset], workers: Workers) -> LevelRun:
    parts = [WorkerRun(worker=i, host=workers.infos[i].host, pid=workers.infos[i].pid, users=shares[i].users,
                       num_records=run.num_records, client=run.client, clock_offset_ms=offsets[i].offset_s * 1000,
                       clock_uncertainty_ms=offsets[i].uncertainty_s * 1000, start_s=workers.start_s[i],
                       starved_s=drained[i].starved_s, wall_s=run.wall_s, nice=workers.infos[i].nice)
             for i, run in enumerate(runs)]
    return LevelRun(level=level.label, kind=level.kind, value=level.value, started_at_unix_s=started_at,
                    wall_s=max(run.wall_s for run in runs), num_records=sum(run.num_records for run in runs),
                    num_warmup=sum(run.num_warmup for run in runs), client=worst_check([run.client for run in runs]),
                    measured_at_unix_s=measured_at, network=runs[0].network, workers=parts,
                    duration_s=runs[0].duration_s)


def measure_offset(workers: Workers, index: int, pings: int = CLOCK_PINGS) -> ClockOffset:
    """The worker's clock against the driver's: over several round trips, the one that took least (the
    worker read its clock somewhere within it, so half of it bounds the error)."""
    best: ClockOffset | None = None
    for _ in range(pings):
        sent = time.perf_counter()
        theirs = workers.clock(index)
        back = time.perf_counter()
        estimate = ClockOffset(theirs - (sent + back) / 2, (back - sent) / 2)
        if best is None or estimate.uncertainty_s < best.uncertainty_s:
            best = estimate
    assert best is not None
    return best


def _where(workers: Workers, index: int) -> str:
    info = workers.infos[index]
    return f"pid {info.pid} on {info.host}"


@dataclass
class Feeder:
    """Hands out the level's requests from the run's one stream: closed loop enough conversations to keep
    each worker's users busy for a second or more, open loop the schedule dealt in turn, LOOKAHEAD_S ahead."""

    level: Level
    bounds: LevelBounds
    specs: Iterator[RequestSpec]
    shares: list[LevelShare]
    outstanding: list[collections.deque[FedItem]] = field(init=False)  # fed, not yet known to be taken
    seen_taken: list[int] = field(init=False)
    ended: bool = False
    _dealt: int = 0
    _next: tuple[float, RequestSpec | None] | None = None

    def __post_init__(self) -> None:
        self.outstanding = [collections.deque() for _ in self.shares]
        self.seen_taken = [0] * len(self.shares)
        self._conversations = conversations(self.specs)
        self._arrivals = schedule(self.level, self.specs)

    def feeds(self, taken: list[int], clock_s: float) -> list[Feed]:
        """What to send each worker now, given how many items each has taken: (items, ended, horizon)."""
        self.taken(taken)
        if self.level.kind == "concurrency":
            batches, horizon = [self._conversations_for(i, clock_s) for i in range(len(self.shares))], None
        else:
            batches, horizon = self._deal(clock_s)
        for index, batch in enumerate(batches):
            self.outstanding[index].extend(batch)
        return [(batch, self.ended, horizon) for batch in batches]

    def taken(self, taken: list[int]) -> None:
        for index, count in enumerate(taken):
            for _ in range(count - self.seen_taken[index]):
                self.outstanding[index].popleft()
            self.seen_taken[index] = count

    def _conversations_for(self, index: int, clock_s: float) -> list[FedItem]:
        users = self.shares[index].users
        per_s = self.seen_taken[index] / clock_s if clock_s > 0.5 else 0.0
        wanted = 2 * users + 8 + int(per_s)  # a second of what it takes, on top of two per user
        batch: list[FedItem] = []
        while not self.ended and len(self.outstanding[index]) + len(batch) < wanted:
            conversation = next(self._conversations, None)
            if conversation is None:
                self.ended = True
                break
            batch.append(conversation)
        return batch

    def _deal(self, clock_s: float) -> tuple[list[list[FedItem]], float]:
        batches: list[list[FedItem]] = [[] for _ in self.shares]
        until = clock_s + LOOKAHEAD_S
        while not self.ended:
            if self._next is None:
                self._next = next(self._arrivals, None)
            if self._next is None or self._past_end(self._next[0]):
                self.ended = True
                break
            scheduled_s, spec = self._next
            if scheduled_s > until:
                break
            spec = spec if spec is not None else next(self.specs, None)
            if spec is None:
                self.ended = True
                break
            batches[self._dealt % len(self.shares)].append((scheduled_s, spec))
            self._dealt += 1
            self._next = None
        return batches, until

    def _past_end(self, scheduled_s: float) -> bool:
        bounds = self.bounds
        return (bounds.max_requests is not None and self._dealt >= bounds.max_requests) or \
            (bounds.duration_s is not None and scheduled_s > bounds.duration_s)

    def unsent(self) -> list[RequestSpec]:
        specs = [spec for queue in self.outstanding for item in queue
                 for spec in (item if isinstance(item, list) else [item[1]])]
        return sorted(specs, key=lambda spec: spec.request_id)


class LocalWorkers(Workers):
    """Workers as processes of this machine (`loadgen.worker.main`), each on a pipe of its own: a call is the
    frame (name, args), its answer ("ok", value) or ("error", message)."""

    def __init__(self, count: int, log_path: Path | None = None) -> None:
        package_root = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        self.log_path = log_path
        self.log: IO[bytes] | int = log_path.open("ab") if log_path is not None else subprocess.DEVNULL
        self.processes: list[subprocess.Popen[bytes]] = []
        self.infos, self.start_s = [], []
        self.out_of_step: set[int] = set()
        try:
            asked = time.perf_counter()
            for _ in range(count):
                self.processes.append(subprocess.Popen(
                    [sys.executable, "-c", WORKER_MAIN, str(os.getpid())], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=self.log, env=env, bufsize=0))
            for index in range(count):
                self.infos.append(self._answer(index, START_TIMEOUT_S))
                self.start_s.append(time.perf_counter() - asked)
        except BaseException:
            self.close()
            raise

    def _call_one(self, index: int, name: str, args: tuple[Any, ...]) -> Any:
        self._send(index, name, args)
        return self._answer(index, CALL_TIMEOUT_S)

    def _in_step(self, index: int) -> None:
        """A pipe whose last answer went unread (a timeout, an interrupt mid-frame) is never used again."""
        if index in self.out_of_step:
            raise WorkerFailed(f"client worker {index} (pid {self.processes[index].pid}): its pipe is out of step")

    def _call_each(self, name: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        failures: dict[int, WorkerFailed] = {}
        for index, arg in enumerate(args):
            try:
                self._send(index, name, arg)
            except WorkerFailed as exc:
                failures[index] = exc
        answers = []
        for index in range(len(args)):  # every answer read, so each pipe stays in step for the next call
            if index in failures:
                continue
            try:
                answers.append(self._answer(index, CALL_TIMEOUT_S))
            except WorkerFailed as exc:
                failures[index] = exc
        if failures:
            raise failures[min(failures)]
        return answers

    def _send(self, index: int, name: str, args: tuple[Any, ...]) -> None:
        self._in_step(index)
        process = self.processes[index]
        try:
            assert process.stdin is not None
            write_frame(process.stdin, (name, args))
        except (BrokenPipeError, OSError):
            self.out_of_step.add(index)
            raise WorkerFailed(self._gone(index)) from None
        except BaseException:
            self.out_of_step.add(index)
            raise

    def _answer(self, index: int, timeout_s: float) -> Any:
        process = self.processes[index]
        assert process.stdout is not None
        try:
            ready, _, _ = select.select([process.stdout], [], [], timeout_s)
            if not ready:
                raise WorkerFailed(f"client worker {index} (pid {process.pid}) did not answer within {timeout_s:g} s")
            status, value = read_frame(process.stdout)
        except EOFError:
            self.out_of_step.add(index)
            raise WorkerFailed(self._gone(index)) from None
        except BaseException:
            self.out_of_step.add(index)
            raise
        if status != "ok":
            raise WorkerFailed(f"client worker {index} (pid {process.pid}): {value}")
        return value

    def _gone(self, index: int) -> str:
        process = self.processes[index]
        try:
            code = process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return f"client worker {index} (pid {process.pid}) closed its pipe"
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return f"client worker {index} (pid {process.pid}) died mid-level ({how})"

    def close(self) -> None:
        """Close each pipe (a worker then exits by itself) and stop whatever is still running."""
        for process in self.processes:
            if process.stdin is not None:
                try:
                    process.stdin.close()
                except OSError:
                    pass
        for process in self.processes:
            try:
                process.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                terminate(process, timeout_s=2.0)
            if process.stdout is not None:
                process.stdout.close()
        if not isinstance(self.log, int):
            self.log.close()
            if self.log_path is not None and self.log_path.stat().st_size == 0:
                self.log_path.unlink()  # nothing said: no file
