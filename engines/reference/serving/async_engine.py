"""The engine's step loop on one dedicated thread, and per-request async streams for the event loop.

Contract: only the step thread touches the `LLMEngine`. The event loop hands it adds and aborts through
a thread-safe queue (applied between steps) and receives each step's outputs in one
`loop.call_soon_threadsafe` call, so a model forward never blocks HTTP handling. A stream whose
consumer stops early (the client disconnected, the handler was cancelled) aborts its request, which
frees its KV blocks before the next step. A consumer that falls `max_pending_outputs` outputs behind (its
client stopped reading) is cut: its request aborted, its stream ended with `SlowConsumerError`, and its
`on_cut` called (the server closes the connection there), so a client that does not read holds neither
memory nor blocks. If a step raises, every open stream gets an `EngineDeadError` and the loop stops (the
server's /health then answers 503). This module knows nothing of HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from engines.reference.core.engine import LLMEngine, QueueFullError, RequestOutput
from engines.reference.core.grammar import GrammarState
from engines.reference.core.sampling import SamplingParams
from engines.reference.serving.metrics import EngineMetrics

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.5  # an idle step thread re-checks its stop flag this often


class EngineDeadError(RuntimeError):
    """The step loop stopped (an error in a step, or shutdown) while the request was in flight."""


class SlowConsumerError(RuntimeError):
    """The stream's consumer fell too far behind; its request was aborted."""


@dataclass(frozen=True)
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_time_s: float
    adapter: str | None = None
    grammar: GrammarState | None = None


@dataclass(frozen=True)
class _Abort:
    request_id: str


class RequestStream:
    """One request's outputs, in order, ending with the finished one; `aclose()` before that aborts it."""

    def __init__(self, owner: AsyncEngine, request_id: str) -> None:
        self.request_id = request_id
        self.queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self.on_cut: Callable[[], None] | None = None  # called once if the stream is cut for falling behind
        self._owner = owner
        self._is_closed = False
        self._cut: SlowConsumerError | None = None

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self._cut is not None:  # before the backlog: nothing more is sent to a consumer that was cut
            raise self._cut
        if self._is_closed:
            raise StopAsyncIteration
        item = await self.queue.get()
        if isinstance(item, BaseException):
            self._close(is_finished=True)  # the engine no longer knows the request
            raise item
        if item.finished:
            self._close(is_finished=True)
        return item

    async def aclose(self) -> None:
        self._close(is_finished=False)

    def _close(self, is_finished: bool) -> None:
        if not self._is_closed:
            self._is_closed = True
            self._owner._close_stream(self.request_id, is_finished)

    def _cut_off(self, error: SlowConsumerError) -> None:
        """Abort the request now (not when the consumer next reads) and tell whoever serves the consumer."""
        self._cut = error
        self._close(is_finished=False)
        if self.on_cut is not None:
            self.on_cut()


class AsyncEngine:
    """Runs `engine.step()` in a background thread and streams each request's outputs to a coroutine."""

    def __init__(
        self, engine: LLMEngine, metrics: EngineMetrics | None = None, max_pending_outputs: int | None = None
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.max_pending_outputs = max_pending_outputs  # None: a stream's queue is unbounded
        self._commands: queue.SimpleQueue[_Add | _Abort] = queue.SimpleQueue()
        self._wakeup = threading.Event()
        self._stop_asked = False  # a plain flag, not an Event: see request_stop
        self._is_stopped = threading.Event()  # set when the step loop has returned
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._streams: dict[str, RequestStream] = {}  # event loop only
        self._pending_lock = threading.Lock()
        self._num_pending_adds = 0
        self.error: BaseException | None = None

    # ---- lifecycle -----------------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the step loop on a new thread; outputs are delivered on `loop`."""
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="reference-engine-step", daemon=True)
        self._thread.start()

    def attach_current_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make the calling thread the step thread, which then calls `run()`; outputs are delivered on `loop`.

        For the thread that loaded the model: stepping there keeps PyTorch on one OpenMP pool (see `serve`).
        """
        self._loop = loop
        self._thread = threading.current_thread()

    def run(self) -> None:
        """Run the step loop on the attached thread until `request_stop()` (or a failed step)."""
        self._run()

    def request_stop(self) -> None:
        """Ask the step loop to stop after its current step (an idle one within IDLE_WAIT_S); returns at once.
        It takes no lock, so a signal handler may call it: the handler runs on the step thread, maybe inside
        `Event.wait` holding the event's lock, which an `Event.set` here would wait for forever."""
        self._stop_asked = True

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the step loop after its current step and wait for it."""
        self.request_stop()
        self._wakeup.set()  # an idle step thread stops now (never from a signal handler: see request_stop)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._is_stopped.wait(timeout_s)

    @property
    def is_alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._is_stopped.is_set() and self.error is None

    # ---- the event loop's side -------------------------------------------------------------------

    @property
    def num_waiting(self) -> int:
        """Requests waiting for admission, those not yet handed to the engine included."""
        return self.engine.scheduler.num_waiting + self._num_pending_adds

    def is_queue_full(self) -> bool:
        return self.num_waiting >= self.engine.config.max_num_waiting

    def generate(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, adapter: str | None = None,
        grammar: GrammarState | None = None,
    ) -> RequestStream:
        """Submit a request (on LoRA `adapter`, or the base model; held to `grammar` if given) now and return its
        output stream; close the stream to abort it.

        Raises EngineDeadError if the step loop is not running, QueueFullError if the waiting queue is
        at its bound (checked and counted in the same event-loop turn, so the bound is exact).
        """
        if not self.is_alive:
            raise EngineDeadError("the engine's step loop is not running")
        if self.is_queue_full():
            raise QueueFullError(f"{self.engine.config.max_num_waiting} requests are already waiting")
        stream = RequestStream(self, request_id)
        self._streams[request_id] = stream
        with self._pending_lock:
            self._num_pending_adds += 1
        self._submit(_Add(request_id, prompt_token_ids, params, time.monotonic(), adapter, grammar))
        return stream

    def _close_stream(self, request_id: str, is_finished: bool) -> None:
        self._streams.pop(request_id, None)
        if not is_finished:
            self._submit(_Abort(request_id))

    def _submit(self, command: _Add | _Abort) -> None:
        self._commands.put(command)
        self._wakeup.set()

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        bound = self.max_pending_outputs
        for output in outputs:
            stream = self._streams.get(output.request_id)
            if stream is None:
                continue
            if bound is not None and stream.queue.qsize() >= bound:
                logger.warning("request %s cut: its client left %d outputs unread (--max-pending-outputs)",
                               output.request_id, bound)  # fmt: skip
                stream._cut_off(SlowConsumerError(f"the client left {bound} outputs unread"))
                continue
            stream.queue.put_nowait(output)

    def _fail(self, request_id: str, error: BaseException) -> None:
        stream = self._streams.get(request_id)
        if stream is not None:
            stream.queue.put_nowait(error)

    def _fail_all(self, error: BaseException) -> None:
        for stream in self._streams.values():
            stream.queue.put_nowait(error)

    # ---- the step thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._step_until_stopped()
        finally:
            self._is_stopped.set()

    def _step_until_stopped(self) -> None:
        try:
            while not self._stop_asked:
                self._apply_commands()
                if not self.engine.has_unfinished():
                    self._record([])
                    self._wakeup.wait(IDLE_WAIT_S)
                    self._wakeup.clear()
                    continue
                outputs = self.engine.step()
                self._record(outputs)
                if outputs:
                    self._call_in_loop(self._deliver, outputs)
        except Exception as exc:  # a bug in a step: fail every request loudly, never hang them
            logger.exception("the engine step loop failed")
            self.error = exc
            # what failed goes to the log only; clients learn that the engine is gone
            self._call_in_loop(self._fail_all, EngineDeadError("the engine failed (the server's log says why)"))
            return
        self._call_in_loop(self._fail_all, EngineDeadError("the server is shutting down"))

    def _apply_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if isinstance(command, _Abort):
                if self.engine.abort(command.request_id) and self.metrics is not None:
                    self.metrics.record_abort()
                continue
            try:
                self.engine.add_request(
                    command.request_id, command.prompt_token_ids, command.params, command.arrival_time_s,
                    command.adapter, command.grammar,
                )
            except Exception as exc:  # the server validated already; a rare race (queue bound) lands here
                self._call_in_loop(self._fail, command.request_id, exc)
            finally:
                with self._pending_lock:
                    self._num_pending_adds -= 1

    def _record(self, outputs: list[RequestOutput]) -> None:
        if self.metrics is not None:
            self.metrics.record_step(self.engine.stats(), outputs)

    def _call_in_loop(self, callback, *args) -> None:  # noqa: ANN001
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(callback, *args)
            except RuntimeError:  # the loop closed meanwhile
                pass
