"""One streaming request to an OpenAI-compatible server -> one `RequestRecord`.

The client only takes timestamps and counts; it computes no metric. All requests of a level share one
`aiohttp` session (see `open_session`). The per-chunk path does as little as possible: one clock read
per network read (every event in a read arrived at the same moment), one JSON parse per event.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import orjson
from aiohttp.client_proto import ResponseHandler
from yarl import URL

from loadgen.sse import SSEParser
from loadgen.token_counts import assign_chunk_tokens
from loadgen.types import RequestRecord, RequestSpec

READ_BUFFER_BYTES = 4 * 1024 * 1024
MAX_ERROR_BODY_BYTES = 2048
THROTTLE_BACKOFF_S = (1.0, 2.0, 4.0, 8.0)  # when a 429 says nothing of when to come back
RATE_LIMIT_ERROR_TYPES = {"rate_limit_exceeded", "rate_limit_error", "too_many_requests", "throttling_error"}
OnThrottle = Literal["fail", "retry"]


@dataclass(frozen=True)
class ClientOptions:
    """How to talk to one endpoint. `api_key` is held in memory only, never written anywhere."""

    base_url: str
    model: str
    api_key: str | None = None
    request_timeout_s: float = 600.0
    temperature: float | None = 0.0
    # Fields outside OpenAI's published API (vLLM, SGLang and llama.cpp take them; OpenAI refuses them).
    strict_openai: bool = False
    ignore_eos: bool = True
    # A 429 is the provider's ceiling: end the request there, or wait as it asks and send it again.
    on_throttle: OnThrottle = "fail"


def open_session(max_connections: int, options: ClientOptions) -> aiohttp.ClientSession:
    """One session per level, sized to it: no connection set-up per request, a big read buffer, and a
    hook that stamps the moment each request's body is handed to the socket."""
    connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, keepalive_timeout=300)
    # aiohttp has no public option for the connection protocol; without this the reads are stamped
    # when the reading task runs (see _StampingHandler).
    connector._factory = functools.partial(_StampingHandler, loop=asyncio.get_running_loop())
    headers = {"Content-Type": "application/json"}
    if options.api_key:
        headers["Authorization"] = f"Bearer {options.api_key}"
    sent_hook = aiohttp.TraceConfig()
    sent_hook.on_request_chunk_sent.append(_on_body_sent)
    sent_hook.on_connection_reuseconn.append(_on_connection_reused)
    sent_hook.on_connection_create_start.append(_on_connection_create_start)
    sent_hook.on_connection_create_end.append(_on_connection_create_end)
    return aiohttp.ClientSession(
        connector=connector,
        headers=headers,
        read_bufsize=READ_BUFFER_BYTES,
        timeout=aiohttp.ClientTimeout(total=options.request_timeout_s),
        cookie_jar=aiohttp.DummyCookieJar(),
        trace_configs=[sent_hook],
    )


class _StampingHandler(ResponseHandler):
    """aiohttp's connection protocol, noting when the socket last gave data. That moment, not when the
    reading task next runs, is when a chunk arrived: when 256 streams tick together, the tasks run one
    after another for milliseconds, while the reads themselves take microseconds each."""

    __slots__ = ("last_read",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.last_read = 0.0

    def data_received(self, data: bytes) -> None:
        self.last_read = time.perf_counter()
        super().data_received(data)


class _SendStamp:
    """Passed through aiohttp's trace context: the clock to read and the record to stamp."""

    __slots__ = ("record", "clock", "reused_connection", "connect_start")

    def __init__(self, record: RequestRecord, clock: Callable[[], float]) -> None:
        self.record = record
        self.clock = clock
        self.reused_connection = False
        self.connect_start = 0.0


async def _on_body_sent(session: object, trace: Any, params: object) -> None:
    # On Python < 3.12 aiohttp writes the body from a separate task, which a busy client runs late;
    # time to first token starts when the request really left, and the wait counts as send delay.
    stamp: _SendStamp = trace.trace_request_ctx
    stamp.record.send_s = stamp.clock()


async def _on_connection_reused(session: object, trace: Any, params: object) -> None:
    trace.trace_request_ctx.reused_connection = True


async def _on_connection_create_start(session: object, trace: Any, params: object) -> None:
    trace.trace_request_ctx.connect_start = time.perf_counter()


async def _on_connection_create_end(session: object, trace: Any, params: object) -> None:
    # A new connection: name resolution, TCP connect, and the TLS handshake for https.
    stamp: _SendStamp = trace.trace_request_ctx
    stamp.record.connect_ms = (time.perf_counter() - stamp.connect_start) * 1000


def build_body(spec: RequestSpec, options: ClientOptions) -> bytes:
    body: dict[str, Any] = {"model": options.model, "max_tokens": spec.max_tokens, "stream": True}
    if spec.api == "chat":
        body["messages"] = spec.messages()
    else:
        body["prompt"] = spec.completion_prompt()
    if options.temperature is not None:
        body["temperature"] = options.temperature
    body["stream_options"] = {"include_usage": True}
    if not options.strict_openai:
        body["stream_options"]["continuous_usage_stats"] = True
        if options.ignore_eos:
            body["ignore_eos"] = True
            body["min_tokens"] = spec.max_tokens
    return orjson.dumps(body)


class StreamFailure(Exception):
    def __init__(self, kind: str, message: str, http_status: int | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.http_status = http_status
        self.retry_after_s = retry_after_s


async def send_request(
    session: aiohttp.ClientSession,
    spec: RequestSpec,
    options: ClientOptions,
    record: RequestRecord,
    clock: Callable[[], float],
    keep_text: bool = False,
) -> RequestRecord:
    """Send `spec`, stream the answer into `record` (times from `clock`; the answer's text too when
    `keep_text`), and return it. Never raises for a server's fault: every failure becomes `ok=False`
    with an error kind. A throttled request is sent again (with `on_throttle="retry"`) after the wait the
    server asks for, as long as the answer can still come within the request timeout of the first try."""
    path = "/chat/completions" if spec.api == "chat" else "/completions"
    body = build_body(spec, options)
    record.max_tokens = spec.max_tokens
    url = _url(options.base_url + path)
    deadline_s = clock() + options.request_timeout_s
    record.attempts = 0
    while True:
        _start_attempt(record, clock())
        asked_wait_s = await _send_once(session, url, body, options, record, clock, keep_text,
                                        deadline_s - record.dispatch_s)
        if record.error_kind != "throttled":
            break
        record.throttled_attempts += 1
        if record.first_send_s is None:
            record.first_send_s = record.send_s
        if options.on_throttle != "retry":
            break
        wait_s = asked_wait_s if asked_wait_s is not None else _backoff_s(record.throttled_attempts)
        if clock() + wait_s >= deadline_s:
            record.error_message = (f"{record.error_message}; waiting {wait_s:g} s more would pass the "
                                    f"{options.request_timeout_s:g} s request timeout")[:500]
            break
        await asyncio.sleep(wait_s)
    record.end_s = clock()
    return record


def _start_attempt(record: RequestRecord, now_s: float) -> None:
    """A fresh try: nothing of a throttled one stays (a rate-limit event may come after some chunks)."""
    record.dispatch_s = record.send_s = now_s
    record.chunk_times_s, record.chunk_tokens = [], []
    record.first_visible_s = record.http_status = record.error_kind = record.error_message = None
    record.ok = False


async def _send_once(
    session: aiohttp.ClientSession, url: URL, body: bytes, options: ClientOptions, record: RequestRecord,
    clock: Callable[[], float], keep_text: bool, timeout_s: float,
) -> float | None:
    """One try (a stale kept-alive connection is tried again at once); returns a 429's Retry-After."""
    stream = _StreamState(record, keep_text)
    max_attempts = max_send_attempts(session)
    for attempt in range(1, max_attempts + 1):
        record.attempts += 1
        stamp = _SendStamp(record, clock)
        try:
            await _exchange(session, url, body, stamp, stream, clock, timeout_s)
        except StreamFailure as failure:
            stream.fail(failure.kind, str(failure), failure.http_status)
            return failure.retry_after_s
        except asyncio.TimeoutError:
            stream.fail("timeout", f"no complete answer within {options.request_timeout_s:g} s")
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            if attempt < max_attempts and _was_stale_connection(stamp, record):
                continue
            kind = "stream_cut" if record.http_status is not None else "connection_error"
            stream.fail(kind, f"{type(exc).__name__}: {exc}")
        except aiohttp.ClientError as exc:
            stream.fail("connection_error", f"{type(exc).__name__}: {exc}")
        return None
    return None


def _backoff_s(num_throttled: int) -> float:
    return THROTTLE_BACKOFF_S[min(num_throttled, len(THROTTLE_BACKOFF_S)) - 1]


def retry_after_s(headers: Any) -> float | None:
    """The wait a 429 asks for: `retry-after-ms` (OpenAI's), else `Retry-After` in seconds or as an HTTP date."""
    exact = headers.get("retry-after-ms")
    try:
        if exact is not None:
            return max(0.0, float(exact) / 1000)
    except ValueError:
        pass
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


async def _exchange(
    session: aiohttp.ClientSession, url: URL, body: bytes, stamp: _SendStamp, stream: _StreamState,
    clock: Callable[[], float], timeout_s: float,
) -> None:
    record = stamp.record
    timeout = aiohttp.ClientTimeout(total=max(timeout_s, 1e-3))
    async with session.post(url, data=body, trace_request_ctx=stamp, timeout=timeout) as response:
        record.http_status = response.status
        if response.status != 200:
            raise await _http_failure(response)
        await _read_stream(response, stream, record.send_s, clock)
    stream.finish()


@functools.lru_cache(maxsize=64)
def _url(text: str) -> URL:
    """Parsed once per endpoint: aiohttp would parse the string again for every request."""
    return URL(text)


def max_send_attempts(session: aiohttp.ClientSession) -> int:
    """Each stale try drops one dead pooled connection, so one more try than the pool holds always reaches
    a fresh connection (llama.cpp's server closes a kept-alive connection after a few requests, and several
    can expire together)."""
    return (session.connector.limit if session.connector and session.connector.limit else 100) + 1


def _was_stale_connection(stamp: _SendStamp, record: RequestRecord) -> bool:
    """A kept-alive connection the server had already closed (llama.cpp's server closes idle ones): nothing
    was answered, so the request is sent again, as HTTP clients do; each try drops one dead pooled
    connection, and a failure on a fresh connection is never retried."""
    return stamp.reused_connection and record.http_status is None


async def _http_failure(response: aiohttp.ClientResponse) -> StreamFailure:
    raw = await response.content.read(MAX_ERROR_BODY_BYTES)
    message = raw.decode("utf-8", "replace").strip()
    try:
        message = orjson.loads(raw)["error"]["message"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        pass
    if response.status == 429:
        wait_s = retry_after_s(response.headers)
        suffix = f" (retry after {wait_s:g} s)" if wait_s is not None else ""
        return StreamFailure("throttled", f"HTTP 429: {message}{suffix}", 429, wait_s)
    return StreamFailure("http_error", f"HTTP {response.status}: {message}", response.status)


async def _read_stream(
    response: aiohttp.ClientResponse, stream: _StreamState, send_s: float, clock: Callable[[], float]
) -> None:
    parser = SSEParser()
    content = response.content
    protocol = response.connection.protocol if response.connection else None
    reads = protocol if isinstance(protocol, _StampingHandler) else None
    offset = time.perf_counter() - clock()  # read times are on perf_counter, records on `clock`
    while not stream.done:
        data = await content.readany()
        if not data:
            for event in parser.flush():
                stream.on_event(event.event, event.data, clock() - send_s)
            return
        # Everything a wake-up returns was in hand at the latest read (never later than now).
        arrived_s = (reads.last_read - offset if reads is not None else clock()) - send_s
        for event in parser.feed(data):
            stream.on_event(event.event, event.data, arrived_s)


def _is_rate_limit(error: Any) -> bool:
    """A provider's rate-limit error sent as an event (after the 200 was already sent)."""
    if not isinstance(error, dict):
        return "rate limit" in str(error).lower()
    code = error.get("code")
    return (code in (429, "429", "rate_limit_exceeded") or error.get("type") in RATE_LIMIT_ERROR_TYPES
            or "rate limit" in str(error.get("message", "")).lower())


class _StreamState:
    """Accumulates one stream's chunks into its record."""

    def __init__(self, record: RequestRecord, keep_text: bool = False) -> None:
        self.record = record
        self.text_parts: list[str] | None = [] if keep_text else None
        self.done = False
        self.saw_finish_reason = False
        self.chunk_chars: list[int] = []
        self.reasoning_chunks: list[int] = []  # indices of the chunks that carried reasoning, not content
        self.usage_deltas: list[int] = []
        self.last_usage_tokens = 0
        self.has_continuous_usage = True
        self.server_reasoning_tokens: int | None = None

    def on_event(self, event_name: str | None, data: bytes, arrived_s: float) -> None:
        if data == b"[DONE]":
            self.done = True
            return
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise StreamFailure("invalid_response", f"malformed event data: {data[:120]!r}") from exc
        if event_name == "error" or "error" in payload:
            error = payload.get("error", payload)
            message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
            kind = "throttled" if _is_rate_limit(error) else "stream_error"
            raise StreamFailure(kind, f"error event in stream: {message}")
        self._on_chunk(payload, arrived_s)

    def _on_chunk(self, payload: dict[str, Any], arrived_s: float) -> None:
        choices = payload.get("choices")
        usage = payload.get("usage")
        text = ""
        is_reasoning = False
        if choices:
            choice = choices[0]
            delta = choice.get("delta")
            if delta:
                text = delta.get("content") or ""
                if not text:
                    text = delta.get("reasoning_content") or delta.get("reasoning") or ""
                    is_reasoning = bool(text)
            text = text or choice.get("text") or ""
            if choice.get("finish_reason"):
                self.saw_finish_reason = True
                self.record.finish_reason = choice["finish_reason"]
        if usage:
            self._on_usage(usage)
        elif text:
            self.has_continuous_usage = False
        if text:
            if is_reasoning:
                self.reasoning_chunks.append(len(self.chunk_chars))
            elif self.record.first_visible_s is None:
                self.record.first_visible_s = arrived_s
            self.record.chunk_times_s.append(arrived_s)
            self.chunk_chars.append(len(text))
            if self.text_parts is not None:
                self.text_parts.append(text)
            self.usage_deltas.append(self._take_usage_delta())

    def _on_usage(self, usage: dict[str, Any]) -> None:
        record = self.record
        record.prompt_tokens = usage.get("prompt_tokens", record.prompt_tokens)
        completion = usage.get("completion_tokens")
        if completion is not None:
            record.server_output_tokens = completion
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            record.cached_tokens = details["cached_tokens"]
        reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
        if reasoning is not None:
            self.server_reasoning_tokens = reasoning

    def _take_usage_delta(self) -> int:
        current = self.record.server_output_tokens or 0
        delta, self.last_usage_tokens = current - self.last_usage_tokens, current
        return delta

    def finish(self) -> None:
        record = self.record
        if not self.done and not self.saw_finish_reason:
            self.fail("stream_cut", "stream ended before [DONE] or a finish_reason")
            return
        if not record.chunk_times_s:
            self.fail("no_tokens", "stream finished without any generated token")
            return
        record.chunk_tokens, record.token_count_source = assign_chunk_tokens(
            self.chunk_chars, self.usage_deltas if self.has_continuous_usage else None,
            record.server_output_tokens,
        )
        record.output_tokens = sum(record.chunk_tokens)
        record.reasoning_tokens = self._reasoning_tokens()
        if self.text_parts is not None:
            record.output_text = "".join(self.text_parts)
        record.ok = True

    def _reasoning_tokens(self) -> int | None:
        """As the server billed them when it says; else the tokens of the reasoning chunks; None: no reasoning."""
        if self.server_reasoning_tokens is not None:
            return self.server_reasoning_tokens
        if not self.reasoning_chunks:
            return None
        return sum(self.record.chunk_tokens[i] for i in self.reasoning_chunks)

    def fail(self, kind: str, message: str, http_status: int | None = None) -> None:
        record = self.record
        record.ok = False
        record.error_kind = kind
        record.error_message = message[:500]
        if http_status is not None:
            record.http_status = http_status
        record.output_tokens = len(record.chunk_times_s)
        record.chunk_tokens = [1] * len(record.chunk_times_s)
