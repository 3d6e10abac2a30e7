"""The driver's calls to its client workers, typed: one method here per call a worker answers
(`loadgen.worker.WorkerCore`'s public methods), whatever carries them.

A transport (`loadgen.pool.LocalWorkers`: a pipe to each local process; `loadgen.ray_workers.RayWorkers`: a
Ray actor each) only sends a call's name and arguments and returns the answers; the name is taken from the
`WorkerCore` method itself, so a call no worker answers is an AttributeError here (and mypy's error), never
a name that fails in the worker. The wire between driver and worker is the transport's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from loadgen.worker import Drained, Feed, WorkerCore, WorkerInfo, WorkerJob

R = TypeVar("R")


class Workers(ABC):
    """Started client workers: each call to one worker by index, or to every worker at once (each sent before
    any answer is read, one argument list per worker). Any call may raise WorkerFailed."""

    infos: list[WorkerInfo]  # each worker's, as it answered when started
    start_s: list[float]  # how long each took to start

    # --- to every worker at once

    def start(self, jobs: list[WorkerJob]) -> None:
        self._each(WorkerCore.start, [(job,) for job in jobs])

    def exchange(self, feeds: list[Feed]) -> list[Drained]:
        """Each worker fed its part and drained of its records, in one call."""
        return self._each(WorkerCore.exchange, feeds)

    def go(self, origins: list[float]) -> None:
        """Each worker starts measuring at its origin, on its own clock."""
        self._each(WorkerCore.go, [(origin,) for origin in origins])

    # --- to one worker

    def info(self, index: int) -> WorkerInfo:
        return self._one(index, WorkerCore.info)

    def clock(self, index: int) -> float:
        return self._one(index, WorkerCore.clock)

    def drain(self, index: int) -> Drained:
        return self._one(index, WorkerCore.drain)

    def stop(self, index: int) -> None:
        self._one(index, WorkerCore.stop)

    def _one(self, index: int, call: Callable[..., R], *args: Any) -> R:
        return self._call_one(index, call.__name__, args)

    def _each(self, call: Callable[..., R], args: Sequence[tuple[Any, ...]]) -> list[R]:
        return self._call_each(call.__name__, args)

    # --- the transport

    @abstractmethod
    def _call_one(self, index: int, name: str, args: tuple[Any, ...]) -> Any:
        """Send the call `name(*args)` to worker `index` and return its answer."""

    @abstractmethod
    def _call_each(self, name: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Send `name(*args[i])` to each worker i, then read every answer; in worker order."""

    @abstractmethod
    def close(self) -> None:
        """Stop every worker (killed if need be); nothing is left running."""
