"""One streaming request to an OpenAI-compatible server -> one `RequestRecord`.

The client only takes timestamps and counts; it computes no metric. All requests of a level share one
`aiohttp` session (see `open_session`). The per-chunk path does as little as possible: one clock read
per network read (every event in a read arrived at the same moment), one JSON parse per event.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp.client_proto import ResponseHandler
from yarl import URL

from loadgen.sse import SSEParser
from loadgen.token_counts import assign_chunk_tokens
from loadgen.types import RequestRecord, RequestSpec

READ_BUFFER_BYTES = 4 * 1024 * 1024
MAX_ERROR_BODY_BYTES = 2048


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

    __slots__ = ("record", "clock", "reused_connection")

    def __init__(self, record: RequestRecord, clock: Callable[[], float]) -> None:
        self.record = record
        self.clock = clock
        self.reused_connection = False


async def _on_body_sent(session: object, trace: Any, params: object) -> None:
    # On Python < 3.12 aiohttp writes the body from a separate task, which a busy client runs late;
    # time to first token starts when the request really left, and the wait counts as send delay.
    stamp: _SendStamp = trace.trace_request_ctx
    stamp.record.send_s = stamp.clock()


async def _on_connection_reused(session: object, trace: Any, params: object) -> None:
    trace.trace_request_ctx.reused_connection = True


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
    def __init__(self, kind: str, message: str, http_status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.http_status = http_status


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
    with an error kind."""
    path = "/chat/completions" if spec.api == "chat" else "/completions"
    body = build_body(spec, options)
    record.max_tokens = spec.max_tokens
    stream = _StreamState(record, keep_text)
    record.dispatch_s = record.send_s = clock()
    url = _url(options.base_url + path)
    max_attempts = max_send_attempts(session)
    for attempt in range(1, max_attempts + 1):
        record.attempts = attempt
        stamp = _SendStamp(record, clock)
        try:
            await _exchange(session, url, body, stamp, stream, clock)
        except StreamFailure as failure:
            stream.fail(failure.kind, str(failure), failure.http_status)
        except asyncio.TimeoutError:
            stream.fail("timeout", f"no complete answer within {options.request_timeout_s:g} s")
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            if attempt < max_attempts and _was_stale_connection(stamp, record):
                continue
            kind = "stream_cut" if record.http_status is not None else "connection_error"
            stream.fail(kind, f"{type(exc).__name__}: {exc}")
        except aiohttp.ClientError as exc:
            stream.fail("connection_error", f"{type(exc).__name__}: {exc}")
        break
    record.end_s = clock()
    return record


async def _exchange(
    session: aiohttp.ClientSession, url: URL, body: bytes, stamp: _SendStamp, stream: _StreamState,
    clock: Callable[[], float],
) -> None:
    record = stamp.record
    async with session.post(url, data=body, trace_request_ctx=stamp) as response:
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
        retry_after = response.headers.get("Retry-After")
        suffix = f" (Retry-After: {retry_after})" if retry_after else ""
        return StreamFailure("rate_limited", f"HTTP 429: {message}{suffix}", 429)
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


class _StreamState:
    """Accumulates one stream's chunks into its record."""

    def __init__(self, record: RequestRecord, keep_text: bool = False) -> None:
        self.record = record
        self.text_parts: list[str] | None = [] if keep_text else None
        self.done = False
        self.saw_finish_reason = False
        self.chunk_chars: list[int] = []
        self.usage_deltas: list[int] = []
        self.last_usage_tokens = 0
        self.has_continuous_usage = True

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
            raise StreamFailure("stream_error", f"error event in stream: {message}")
        self._on_chunk(payload, arrived_s)

    def _on_chunk(self, payload: dict[str, Any], arrived_s: float) -> None:
        choices = payload.get("choices")
        usage = payload.get("usage")
        text = ""
        if choices:
            choice = choices[0]
            delta = choice.get("delta")
            text = (delta.get("content") or delta.get("reasoning_content") or "") if delta else ""
            text = text or choice.get("text") or ""
            if choice.get("finish_reason"):
                self.saw_finish_reason = True
                self.record.finish_reason = choice["finish_reason"]
        if usage:
            self._on_usage(usage)
        elif text:
            self.has_continuous_usage = False
        if text:
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
        if self.text_parts is not None:
            record.output_text = "".join(self.text_parts)
        record.ok = True

    def fail(self, kind: str, message: str, http_status: int | None = None) -> None:
        record = self.record
        record.ok = False
        record.error_kind = kind
        record.error_message = message[:500]
        if http_status is not None:
            record.http_status = http_status
        record.output_tokens = len(record.chunk_times_s)
        record.chunk_tokens = [1] * len(record.chunk_times_s)
