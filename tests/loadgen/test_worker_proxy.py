"""The driver's calls to its client workers: one typed method per call a worker answers, sent by the name of
the worker's own method, and a worker that refuses any other name."""

from __future__ import annotations

import inspect
import io
import os
from collections.abc import Sequence
from typing import Any

import pytest

from loadgen.pool import LocalWorkers
from loadgen.ray_workers import RayWorkers
from loadgen.worker import CALLS, WorkerCore, WorkerInfo, answer, read_frame, serve, write_frame
from loadgen.worker_proxy import Workers


def public_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}


def test_the_driver_makes_exactly_the_calls_a_worker_answers() -> None:
    assert CALLS == public_methods(WorkerCore) == {"info", "clock", "start", "exchange", "go", "drain", "stop"}
    assert public_methods(Workers) - {"close"} == CALLS
    for transport in (LocalWorkers, RayWorkers):  # both carry the same typed calls, and only carry them
        assert issubclass(transport, Workers)
        assert public_methods(transport) <= {"close"}, f"{transport.__name__} adds calls of its own"


class InProcess(Workers):
    """Workers that are cores in this process, answering by name as a pipe's or an actor's worker does."""

    def __init__(self, count: int) -> None:
        self.cores = [WorkerCore() for _ in range(count)]
        self.sent: list[tuple[int, str, tuple[Any, ...]]] = []
        self.infos = [core.info() for core in self.cores]
        self.start_s = [0.0] * count

    def _call_one(self, index: int, name: str, args: tuple[Any, ...]) -> Any:
        self.sent.append((index, name, args))
        return answer(self.cores[index], name, args)

    def _call_each(self, name: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        return [self._call_one(index, name, arg) for index, arg in enumerate(args)]

    def close(self) -> None:
        pass


def test_each_call_is_sent_as_the_name_of_the_workers_method_and_answered_by_it() -> None:
    workers = InProcess(2)
    info = workers.info(1)
    assert isinstance(info, WorkerInfo) and info.pid == os.getpid()
    assert isinstance(workers.clock(0), float)
    workers.stop(1)  # an idle worker: nothing to cancel
    workers.go([1.0, 2.0])  # before a start: nothing to tell
    assert workers.sent == [(1, "info", ()), (0, "clock", ()), (1, "stop", ()), (0, "go", (1.0,)), (1, "go", (2.0,))]
    for name in ("info", "clock", "stop", "go", "start", "exchange", "drain"):
        assert f"WorkerCore.{name}" in inspect.getsource(getattr(Workers, name))


@pytest.mark.parametrize("name", ["nope", "_run", "lock", "state"])
def test_a_worker_refuses_a_name_that_is_not_one_of_its_calls(name: str) -> None:
    with pytest.raises(AttributeError, match=f"a client worker answers clock, drain, exchange, go, info, start, "
                                             f"stop; not '{name}'"):
        answer(WorkerCore(), name, ())


def test_a_local_worker_answers_over_its_pipe_and_refuses_an_unknown_call() -> None:
    calls = io.BytesIO()
    for frame in [("clock", ()), ("nope", ()), ("stop", ())]:
        write_frame(calls, frame)
    calls.seek(0)
    answers = io.BytesIO()
    serve(calls, answers)  # until the calls end
    answers.seek(0)
    said = [read_frame(answers) for _ in range(4)]
    assert said[0][0] == "ok" and isinstance(said[0][1], WorkerInfo)  # a worker says who it is first
    assert said[1][0] == "ok" and isinstance(said[1][1], float)
    assert said[2] == ("error", "AttributeError: a client worker answers clock, drain, exchange, go, info, start, "
                                "stop; not 'nope'")
    assert said[3] == ("ok", None)
    with pytest.raises(EOFError):
        read_frame(answers)
