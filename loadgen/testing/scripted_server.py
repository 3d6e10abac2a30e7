"""An OpenAI-compatible streaming server whose timing and faults are scripted, to calibrate clients.

Every answer follows the script: the first chunk `ttft_ms` after the request arrived, then one chunk
every `itl_ms`, each carrying `tokens_per_chunk` tokens, on an absolute schedule (no drift). Faults:
`http_500`, `http_429` (with Retry-After), `error_event`, `rate_limit_event` (a provider's rate-limit error
sent as an event, after the 200), `cut` (the connection drops mid-stream),
`stall` (no chunk for `stall_ms`, once, after `fault_after_chunks` chunks), `drop` (the connection is
closed without an answer), `drop_reused` (the same, only on a kept-alive connection that already served a
request: what a client sees when a server closes idle connections); `fault_every` = n applies the fault to
every n-th request only. `PUT /_script` changes the script of a running server; `GET /_sent` says when
the chunks really left (time to first chunk and gaps between chunks, as percentiles) and clears that;
`GET /_prompts` lists a hash of every prompt that arrived, in order, and clears that (so a client can be held
to never sending one twice). `adapters` are LoRA adapters it serves beside `model` (listed at /v1/models with
their parent, as vLLM lists them; answered like the model); `GET /_models` lists the model every completion
request asked for, in order, and clears that.

A provider can be played too: `reasoning_tokens` streams that many tokens first as `delta.reasoning_content`
(and reports them in `usage.completion_tokens_details`), `rate_limit_per_s` answers 429 with Retry-After
past a token bucket of that many requests a second (`rate_limit_burst` deep), and `prefix_cache_block_words`
reports as `cached_tokens` the prompt's leading blocks of words already seen in an earlier prompt.

Load can be scripted too, so a capacity under an SLO is known in closed form: `itl_per_stream_ms` adds
that much to every gap for each other stream in flight (gap = itl_ms + itl_per_stream_ms * (streams - 1),
taken when the gap starts), and `max_streams` caps the streams in flight: past it a request waits, in
arrival order, and its time to first token includes the wait.

It speaks plain HTTP/1.1 (keep-alive, chunked transfer) on non-blocking sockets driven by asyncio, with
timers instead of a task per stream: its own overhead must stay far below the timing it promises, even
when 256 streams tick in the same millisecond. A request's schedule starts when the kernel received it
(`SO_TIMESTAMPNS`, on Linux), so a burst of arrivals the server is slow to read still gets its promised
timing.

    python -m loadgen.testing.scripted_server --port 8011 --ttft-ms 100 --itl-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import gc
import hashlib
import heapq
import itertools
import math
import select
import selectors
import signal
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

import orjson

from loadgen.testing.provider_play import PrefixCache, TokenBucket

Fault = Literal["none", "http_500", "http_429", "error_event", "rate_limit_event", "cut", "stall", "drop",
                "drop_reused"]
ERROR_EVENT = b'data: {"error": {"message": "scripted failure", "code": 500}}\n\n'
RATE_LIMIT_EVENT = b'data: {"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded", "code": 429}}\n\n'
STATUS_TEXT = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}


@dataclass(frozen=True)
class Script:
    ttft_ms: float = 100.0
    itl_ms: float = 20.0
    tokens_per_chunk: int = 1
    fault: Fault = "none"
    fault_every: int = 1
    fault_after_chunks: int = 3
    stall_ms: float = 1000.0
    model: str = "scripted"
    itl_per_stream_ms: float = 0.0
    max_streams: int = 0  # 0: no cap
    reasoning_tokens: int = 0  # the first tokens of every chat answer, streamed as reasoning
    rate_limit_per_s: float = 0.0  # 0: no limit
    rate_limit_burst: float = 1.0
    prefix_cache_block_words: int = 0  # 0: no prefix cache
    # A quiz: a prompt ending in "[[answer: TEXT]]" is answered TEXT for a known share of questions, else "wrong"
    # (below 0: off). Each question is decided by its hash (`quiz_is_right`), the share lowered by
    # right_share_per_stream for each other stream in flight when it arrives (answers that worsen under load).
    right_share: float = -1.0
    right_share_per_stream: float = 0.0
    adapters: tuple[str, ...] = ()  # LoRA adapters served beside `model`

    @property
    def is_loaded(self) -> bool:
        return self.itl_per_stream_ms > 0 or self.max_streams > 0


class SentTiming:
    """When chunks really left (a server on one core writes 256 chunks due together one after another):
    the time from each request's arrival to its first chunk, and between a stream's consecutive chunks.
    `GET /_sent` reports and clears them, so a client's error can be told apart from the server's."""

    def __init__(self) -> None:
        self.ttft_ms: list[float] = []
        self.itl_ms: list[float] = []

    def report_and_clear(self) -> dict[str, Any]:
        report = {"num_requests": len(self.ttft_ms), "num_gaps": len(self.itl_ms),
                  "ttft_ms": _percentiles(self.ttft_ms), "itl_ms": _percentiles(self.itl_ms)}
        self.ttft_ms, self.itl_ms = [], []
        return report


def _percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {f"p{q}": ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] for q in (50, 90, 99)}


class Ticker:
    """Every stream's next chunk in one heap, behind one loop timer. Chunks due together are written in
    one pass, each once it is due, with no trip through the selector between them: at 256 streams that
    trip would cost more than the writes."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, ScriptedProtocol, StreamPlan, int]] = []
        self.order = itertools.count()
        self.timer: asyncio.TimerHandle | None = None
        self.running = False

    def add(self, due: float, protocol: ScriptedProtocol, plan: StreamPlan, index: int) -> None:
        heapq.heappush(self.heap, (due, next(self.order), protocol, plan, index))
        if self.running or (self.timer is not None and self.timer.when() <= due):
            return
        if self.timer is not None:
            self.timer.cancel()
        self.timer = asyncio.get_running_loop().call_at(due, self.run_due)

    def run_due(self) -> None:
        loop = asyncio.get_running_loop()
        self.timer, self.running = None, True
        try:
            while self.heap and self.heap[0][0] <= loop.time():
                _, _, protocol, plan, index = heapq.heappop(self.heap)
                protocol.send_planned(plan, index)
        finally:
            self.running = False
            if self.heap:
                self.timer = loop.call_at(self.heap[0][0], self.run_due)


class ScriptState:
    """The script now in force, shared by every connection of one server, and the streams in flight."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.counter = itertools.count(1)
        self.sent = SentTiming()
        self.ticker = Ticker()
        self.streams_in_flight = 0
        self.waiting: collections.deque[tuple[ScriptedProtocol, StreamPlan]] = collections.deque()
        self.bucket = TokenBucket(script.rate_limit_per_s, script.rate_limit_burst)
        self.prefix_cache = PrefixCache(script.prefix_cache_block_words)
        self.prompts: list[str] = []  # sha256 of each completion request's messages (or prompt), as they came
        self.models: list[str | None] = []  # the model each completion request asked for, as they came

    def admit(self, protocol: ScriptedProtocol, plan: StreamPlan) -> None:
        """Start the stream now, or queue it while `max_streams` are in flight."""
        cap = self.script.max_streams
        if cap and self.streams_in_flight >= cap:
            self.waiting.append((protocol, plan))
        else:
            self.start(protocol, plan, plan.arrived)

    def start(self, protocol: ScriptedProtocol, plan: StreamPlan, start: float) -> None:
        self.streams_in_flight += 1
        plan.is_streaming = True
        plan.next_due = start + plan.first_due_s()
        self.ticker.add(plan.next_due, protocol, plan, 0)

    def release(self, plan: StreamPlan) -> None:
        """A stream ended (or its connection did): its slot goes to the first request waiting for one."""
        if not plan.is_streaming:
            return
        plan.is_streaming = False
        self.streams_in_flight -= 1
        while self.waiting and (not self.script.max_streams or self.streams_in_flight < self.script.max_streams):
            protocol, queued = self.waiting.popleft()
            if protocol.transport is not None:
                self.start(protocol, queued, asyncio.get_running_loop().time())

    def update(self, changes: dict[str, Any]) -> None:
        unknown = set(changes) - {f.name for f in fields(Script)}
        if unknown:
            raise ValueError(f"unknown script field(s): {', '.join(sorted(unknown))}")
        self.script = replace(self.script, **changes)
        self.counter = itertools.count(1)
        self.bucket = TokenBucket(self.script.rate_limit_per_s, self.script.rate_limit_burst)
        self.prefix_cache = PrefixCache(self.script.prefix_cache_block_words)


# Linux's values (Python's socket module does not name them); elsewhere arrivals are stamped on reading.
SO_TIMESTAMPNS = 35 if sys.platform.startswith("linux") else None
TIMESTAMP_SPACE = socket.CMSG_SPACE(16) if SO_TIMESTAMPNS else 0
READ_BYTES = 256 * 1024


def _arrival_time(ancdata: list[tuple[int, int, bytes]]) -> float:
    """The kernel's receive time of the data just read, on perf_counter's clock (now if it gave none)."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            seconds, nanoseconds = struct.unpack("qq", data[:16])
            return time.perf_counter() - (time.time() - (seconds + nanoseconds * 1e-9))
    return time.perf_counter()


class Connection:
    """One accepted socket: read with recvmsg, so every read carries the kernel's receive time, and
    written directly (what the socket cannot take yet waits for it to drain)."""

    def __init__(self, sock: socket.socket, protocol: ScriptedProtocol, loop: asyncio.AbstractEventLoop) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.protocol = protocol
        self.loop = loop
        self.pending = b""
        self.closing = False
        self.closed = False
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if SO_TIMESTAMPNS:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        loop.add_reader(self.fd, self.on_readable)
        protocol.connection_made(self)

    def on_readable(self) -> None:
        try:
            data, ancdata, _, _ = self.sock.recvmsg(READ_BYTES, TIMESTAMP_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, ancdata = b"", []
        if not data:
            self.abort()
            return
        self.protocol.data_received(data, _arrival_time(ancdata))

    def write(self, data: bytes) -> None:
        if self.closed or self.closing:
            return
        if not self.pending:
            try:
                data = data[self.sock.send(data):]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self.abort()
                return
            if not data:
                return
            self.loop.add_writer(self.fd, self.on_writable)
        self.pending += data

    def on_writable(self) -> None:
        try:
            self.pending = self.pending[self.sock.send(self.pending):]
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.abort()
            return
        if not self.pending:
            self.loop.remove_writer(self.fd)
            if self.closing:
                self.abort()

    def close(self) -> None:
        """Close once everything already written has left, as asyncio's transports do."""
        if self.pending:
            self.closing = True
            self.loop.remove_reader(self.fd)
        else:
            self.abort()

    def abort(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.remove_reader(self.fd)
        self.loop.remove_writer(self.fd)
        self.sock.close()
        self.protocol.connection_lost()


class ScriptedProtocol:
    """One HTTP/1.1 connection: parse requests, answer them on the script's schedule."""

    def __init__(self, state: ScriptState) -> None:
        self.state = state
        self.buffer = b""
        self.transport: Connection | None = None
        self.num_served = 0
        self.active: StreamPlan | None = None  # the stream this connection answers now

    def connection_made(self, transport: Connection) -> None:
        self.transport = transport

    def connection_lost(self) -> None:
        self.transport = None  # a chunk still planned finds no connection and is dropped
        if self.active is not None:
            self.state.release(self.active)  # its slot, if it held one, goes to the next request waiting

    def data_received(self, data: bytes, arrived: float) -> None:
        self.buffer += data
        self.handle_buffered(arrived)

    def handle_buffered(self, arrived: float) -> None:
        while self.transport is not None:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].decode("latin-1")
            length = _content_length(head)
            if len(self.buffer) < head_end + 4 + length:
                return
            body = self.buffer[head_end + 4 : head_end + 4 + length]
            self.buffer = self.buffer[head_end + 4 + length :]
            method, path = head.split(" ", 2)[:2]
            self.handle(method, path, body, arrived)

    def handle(self, method: str, path: str, body: bytes, arrived: float) -> None:
        script = self.state.script
        if method == "GET" and path == "/health":
            self.respond(200, b"ok", "text/plain")
        elif method == "GET" and path == "/v1/models":
            adapters = [{"id": name, "object": "model", "parent": script.model} for name in script.adapters]
            self.respond_json(200, {"object": "list", "data": [{"id": script.model, "object": "model"}, *adapters]})
        elif method == "GET" and path == "/_models":
            models, self.state.models = self.state.models, []
            self.respond_json(200, {"models": models})
        elif method == "GET" and path == "/_sent":
            self.respond_json(200, self.state.sent.report_and_clear())
        elif method == "GET" and path == "/_prompts":
            prompts, self.state.prompts = self.state.prompts, []
            self.respond_json(200, {"prompts": prompts})
        elif method == "PUT" and path == "/_script":
            try:
                self.state.update(orjson.loads(body))
                self.respond_json(200, asdict(self.state.script))
            except (ValueError, TypeError) as exc:
                self.respond_error(400, str(exc))
        elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            self.complete(orjson.loads(body), path.endswith("chat/completions"), arrived)
        else:
            self.respond_error(404, f"no route {method} {path}")

    def complete(self, body: dict[str, Any], is_chat: bool, arrived: float) -> None:
        script = self.state.script
        said = body.get("messages") if is_chat else body.get("prompt")
        self.state.prompts.append(hashlib.sha256(orjson.dumps(said)).hexdigest())
        self.state.models.append(body.get("model"))
        fault = script.fault if next(self.state.counter) % script.fault_every == 0 else "none"
        if body.get("model") != script.model and body.get("model") not in script.adapters:
            self.respond_error(404, f"model '{body.get('model')}' does not exist")
        elif fault == "http_500":
            self.respond_error(500, "scripted internal error")
        elif fault == "http_429":
            self.respond_error(429, "scripted rate limit", extra_headers="Retry-After: 2\r\n")
        elif (wait_s := self.state.bucket.take()) > 0:
            # Retry-After in whole seconds (HTTP's unit) and exact milliseconds, as OpenAI's API sends both.
            headers = f"Retry-After: {max(1, math.ceil(wait_s))}\r\nretry-after-ms: {wait_s * 1000:.0f}\r\n"
            self.respond_error(429, f"rate limit of {script.rate_limit_per_s:g} requests/s reached", headers,
                               error_type="rate_limit_exceeded")
        elif fault == "drop" or (fault == "drop_reused" and self.num_served > 0):
            assert self.transport is not None
            self.transport.close()
        elif not body.get("stream"):  # the whole answer at once (OpenAI's default; eval harnesses ask so), untimed
            self.num_served += 1
            self.respond_json(200, _whole_answer(body, is_chat, script))
        else:
            self.num_served += 1
            self.stream(body, is_chat, fault, arrived)

    def stream(self, body: dict[str, Any], is_chat: bool, fault: Fault, arrived: float) -> None:
        assert self.transport is not None
        script = self.state.script
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        loop = asyncio.get_running_loop()
        offset_s = loop.time() - time.perf_counter()  # the loop's clock may differ from perf_counter
        plan = StreamPlan(body, script, is_chat, fault, arrived + offset_s)
        plan.cached_tokens = self.state.prefix_cache.cached_words(_prompt_words(body))
        if script.right_share >= 0:
            plan.first_text = _quiz_answer(body, script, self.state.streams_in_flight)
        if script.ttft_ms == 0 and script.itl_ms == 0 and fault == "none" and not script.is_loaded \
                and not plan.cached_tokens and plan.first_text is None:
            self.transport.write(_instant_answer(plan.num_tokens, plan.prompt_tokens, is_chat, script))
            return
        self.active = plan
        self.state.admit(self, plan)

    def send_planned(self, plan: StreamPlan, index: int) -> None:
        """Chunk `index` is due: write it, and plan the next one from this one's due time (so no drift)."""
        if self.transport is None:
            self.state.release(plan)
            return
        plan.note_sent(index, asyncio.get_running_loop().time(), self.state.sent)
        if plan.cuts_at(index):
            self.state.release(plan)
            self.transport.close()
        elif plan.errors_at(index):
            self.state.release(plan)
            self.write_chunk(RATE_LIMIT_EVENT if plan.fault == "rate_limit_event" else ERROR_EVENT)
            self.write_chunk(b"")
        elif index == plan.num_chunks - 1:
            self.state.release(plan)
            self.write_chunk(plan.event(index) + plan.tail())
            self.write_chunk(b"")
        else:
            self.write_chunk(plan.event(index))
            plan.next_due += plan.gap_s(index + 1, self.state.streams_in_flight)
            self.state.ticker.add(plan.next_due, self, plan, index + 1)

    def write_chunk(self, payload: bytes) -> None:
        assert self.transport is not None
        self.transport.write(b"%x\r\n%b\r\n" % (len(payload), payload))

    def respond(self, status: int, payload: bytes, content_type: str, extra_headers: str = "") -> None:
        assert self.transport is not None
        head = (
            f"HTTP/1.1 {status} {STATUS_TEXT.get(status, 'Error')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n{extra_headers}\r\n"
        )
        self.transport.write(head.encode() + payload)

    def respond_json(self, status: int, payload: Any) -> None:
        self.respond(status, orjson.dumps(payload), "application/json")

    def respond_error(self, status: int, message: str, extra_headers: str = "", error_type: str = "scripted") -> None:
        payload = {"error": {"message": message, "type": error_type, "code": status}}
        self.respond(status, orjson.dumps(payload), "application/json", extra_headers)


class StreamPlan:
    """What one answer sends and when: chunk 0 is due ttft after the stream starts, each next one a gap
    after the last (itl, plus itl_per_stream for each other stream then in flight, plus a stall once)."""

    def __init__(self, body: dict[str, Any], script: Script, is_chat: bool, fault: Fault,
                 arrived: float = 0.0) -> None:
        self.script = script
        self.is_chat = is_chat
        self.fault = fault
        self.arrived = arrived  # on the loop's clock
        self.next_due = 0.0
        self.is_streaming = False  # holds one of the server's stream slots
        self.num_tokens = int(body.get("max_tokens") or 16)
        self.num_chunks = -(-self.num_tokens // script.tokens_per_chunk)
        self.continuous_usage = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))
        self.prompt_tokens = len(_prompt_words(body))
        self.reasoning_tokens = min(script.reasoning_tokens, self.num_tokens) if is_chat else 0
        self.cached_tokens = 0
        self.last_sent = 0.0
        self.first_text: str | None = None  # a quiz's answer, sent as the first chunk's content
        self.logprobs = bool(body.get("logprobs"))  # a quiz's first token with its logprob, when asked

    def note_sent(self, index: int, now: float, sent: SentTiming) -> None:
        if index == 0:
            sent.ttft_ms.append((now - self.arrived) * 1000)  # a wait for a stream slot included
        else:
            sent.itl_ms.append((now - self.last_sent) * 1000)
        self.last_sent = now

    def first_due_s(self) -> float:
        return (self.script.ttft_ms + self._stall_ms(0)) / 1000

    def gap_s(self, index: int, streams_in_flight: int) -> float:
        """The gap before chunk `index`, with `streams_in_flight` streams (this one included) now."""
        gap_ms = self.script.itl_ms
        if self.script.itl_per_stream_ms:
            gap_ms += self.script.itl_per_stream_ms * max(0, streams_in_flight - 1)
        if self.fault == "stall":
            gap_ms += self._stall_ms(index)
        return gap_ms / 1000

    def _stall_ms(self, index: int) -> float:
        return self.script.stall_ms if self.fault == "stall" and index == self.script.fault_after_chunks else 0.0

    def cuts_at(self, index: int) -> bool:
        return self.fault == "cut" and index == self.script.fault_after_chunks

    def errors_at(self, index: int) -> bool:
        return self.fault in ("error_event", "rate_limit_event") and index == self.script.fault_after_chunks

    def tokens_sent_after(self, index: int) -> int:
        return min(self.num_tokens, (index + 1) * self.script.tokens_per_chunk)

    def event(self, index: int) -> bytes:
        sent = self.tokens_sent_after(index)
        count = sent - index * self.script.tokens_per_chunk
        is_reasoning = sent <= self.reasoning_tokens  # a chunk is reasoning when all its tokens are
        usage_prompt = self.prompt_tokens if self.continuous_usage else None
        if index == 0 and self.first_text is not None:
            usage = _usage(usage_prompt, sent) if usage_prompt is not None else None
            return _event(self.first_text + " x" * (count - 1), self.is_chat, usage=usage,
                          logprobs=_logprobs(self.first_text.split()[0], self.is_chat) if self.logprobs else None)
        return _token_event(count, self.is_chat, usage_prompt, sent, is_reasoning)

    def tail(self) -> bytes:
        usage = _usage(self.prompt_tokens, self.num_tokens, self.reasoning_tokens, self.cached_tokens)
        last = _event("", self.is_chat, finish_reason="length")
        usage_only = b"data: " + orjson.dumps({"id": "scripted", "choices": [], "usage": usage}) + b"\n\n"
        return last + usage_only + b"data: [DONE]\n\n"


@functools.lru_cache(maxsize=64)
def _instant_answer(num_tokens: int, prompt_tokens: int, is_chat: bool, script: Script) -> bytes:
    """The whole answer in one write (cached), so the server costs next to nothing per request."""
    plan = StreamPlan({"max_tokens": num_tokens}, script, is_chat, "none")
    plan.prompt_tokens = prompt_tokens
    plan.reasoning_tokens = min(script.reasoning_tokens, num_tokens) if is_chat else 0
    payload = b"".join(plan.event(i) for i in range(plan.num_chunks)) + plan.tail()
    return b"%x\r\n%b\r\n0\r\n\r\n" % (len(payload), payload)


@functools.lru_cache(maxsize=1 << 16)
def _token_event(count: int, is_chat: bool, prompt_tokens: int | None, sent: int, is_reasoning: bool = False) -> bytes:
    """One chunk of `count` tokens (cached: the server's cost per chunk must stay tiny)."""
    usage = _usage(prompt_tokens, sent) if prompt_tokens is not None else None
    return _event(" x" * count, is_chat, usage=usage, is_reasoning=is_reasoning)


def _event(text: str, is_chat: bool, finish_reason: str | None = None, usage: dict | None = None,
           is_reasoning: bool = False, logprobs: dict[str, Any] | None = None) -> bytes:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish_reason}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    if is_chat:
        choice["delta"] = {"reasoning_content" if is_reasoning else "content": text} if text else {}
    else:
        choice["text"] = text
    payload: dict[str, Any] = {"id": "scripted", "object": "chat.completion.chunk" if is_chat else "text_completion",
                               "model": "scripted", "choices": [choice]}  # OpenAI's names: some clients parse by them
    if usage is not None:
        payload["usage"] = usage
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _whole_answer(body: dict[str, Any], is_chat: bool, script: Script) -> dict[str, Any]:
    """A non-streamed completion: a quiz's answer, else `max_tokens` words."""
    num_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
    text = (_quiz_answer(body, script, 0) if script.right_share >= 0 else None) or " x" * num_tokens
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop", "logprobs": None}
    if is_chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    prompt_tokens = len(_prompt_words(body))
    return {"id": "scripted", "object": "chat.completion" if is_chat else "text_completion", "model": script.model,
            "choices": [choice], "usage": _usage(prompt_tokens, len(text.split()))}


def _logprobs(token: str, is_chat: bool) -> dict[str, Any]:
    """OpenAI's logprobs of one token, its own the top alternative (chat: `content`; completions: `tokens`)."""
    if is_chat:
        return {"content": [{"token": token, "logprob": -0.05, "top_logprobs": [{"token": token, "logprob": -0.05}]}]}
    return {"tokens": [token], "token_logprobs": [-0.05], "top_logprobs": [{token: -0.05}]}


def _usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int = 0,
           cached_tokens: int = 0) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
    if reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    if cached_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return usage


QUIZ_MARK = "[[answer:"


def quiz_is_right(question: str, share: float) -> bool:
    """Whether the quiz answers `question` (the prompt before its mark) right at `share`: its hash decides."""
    return int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) / 2**32 < share


def _quiz_answer(body: dict[str, Any], script: Script, streams_in_flight: int) -> str | None:
    said = body.get("messages") or []
    prompt = str(said[-1].get("content", "")) if said else str(body.get("prompt", ""))
    question, mark, rest = prompt.rpartition(QUIZ_MARK)
    if not mark:
        return None
    share = script.right_share - script.right_share_per_stream * max(0, streams_in_flight)
    return rest.split("]]", 1)[0].strip() if quiz_is_right(question, share) else "wrong"


def _prompt_words(body: dict[str, Any]) -> list[str]:
    if "messages" in body:
        return [word for m in body["messages"] for word in str(m.get("content", "")).split()]
    return str(body.get("prompt", "")).split()


def _content_length(head: str) -> int:
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return int(value.strip())
    return 0


class PreciseEpollSelector(selectors.EpollSelector):
    """epoll, woken on time to the microsecond. epoll rounds its timeout up to whole milliseconds, which
    would put up to 1 ms of the server's own jitter into every gap it promises; select() keeps
    microseconds but costs time in proportion to every open connection on each pass. So the wait is a
    select() on the epoll descriptor alone, and epoll then says which connections are ready."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout > 0:
            select.select([self.fileno()], [], [], timeout)
        return super().select(0)


class Listener:
    """Accepts connections and gives each its own `ScriptedProtocol`, all sharing one script."""

    def __init__(self, host: str, port: int, script: Script, loop: asyncio.AbstractEventLoop) -> None:
        self.state = ScriptState(script)
        self.loop = loop
        self.sock = socket.create_server((host, port), backlog=4096)
        self.sock.setblocking(False)
        self.port: int = self.sock.getsockname()[1]
        loop.add_reader(self.sock.fileno(), self.accept)

    def accept(self) -> None:
        while True:
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. out of file descriptors: the client sees a refused connection
                return
            Connection(sock, ScriptedProtocol(self.state), self.loop)

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


async def _main(host: str, port: int, script: Script) -> None:
    loop = asyncio.get_running_loop()
    listener = Listener(host, port, script, loop)
    # A full collection pauses every stream; what lives from start-up on is left out of the scans, and
    # collections come rarely (what a connection leaves behind is freed by reference counting).
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # PID 1 in a container ignores signals it has no handler for
        loop.add_signal_handler(sig, stop.set)
    print(f"scripted server listening on http://{host}:{listener.port}/v1", flush=True)
    await stop.wait()
    listener.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011, help="0 picks a free port (printed at start)")
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--itl-per-stream-ms", type=float, default=0.0, help="added to each gap per other stream")
    parser.add_argument("--max-streams", type=int, default=0, help="streams in flight at most (0: no cap)")
    parser.add_argument("--reasoning-tokens", type=int, default=0, help="tokens streamed first as reasoning")
    parser.add_argument("--rate-limit-per-s", type=float, default=0.0, help="429 past this many requests/s (0: none)")
    parser.add_argument("--prefix-cache-block-words", type=int, default=0, help="report cached tokens (0: none)")
    parser.add_argument("--adapters", default="", help="NAME,NAME,...: LoRA adapters served beside --model")
    args = parser.parse_args()
    script = Script(args.ttft_ms, args.itl_ms, args.tokens_per_chunk, model=args.model,
                    itl_per_stream_ms=args.itl_per_stream_ms, max_streams=args.max_streams,
                    reasoning_tokens=args.reasoning_tokens, rate_limit_per_s=args.rate_limit_per_s,
                    prefix_cache_block_words=args.prefix_cache_block_words,
                    adapters=tuple(name for name in args.adapters.split(",") if name))
    loop = asyncio.SelectorEventLoop(PreciseEpollSelector() if hasattr(select, "epoll") else selectors.SelectSelector())
    try:
        loop.run_until_complete(_main(args.host, args.port, script))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
