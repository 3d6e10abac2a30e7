"""One streaming request to an OpenAI-compatible server -> one `RequestRecord`.

The client only takes timestamps and counts; it computes no metric. All requests of a level share one
`Session`: kept-alive connections (`loadgen.http1`) that stamp every socket read and hand each piece of an
answer to its `_StreamState` with that read's time (every event in a read arrived at the same moment). Per
streamed chunk: one clock read, httptools' C parser, one JSON parse per event, no task woken.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from multidict import CIMultiDict
from yarl import URL

from loadgen.http1 import ConnectionLost, ConnectionPool, InvalidResponse, request_head
from loadgen.sse import SSEParser
from loadgen.structured import ToolCallParts
from loadgen.token_counts import assign_chunk_tokens
from loadgen.types import RequestRecord, RequestSpec

API_PATHS = {"chat": "/chat/completions", "completions": "/completions"}
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
    # Ask for each token's log-probability and the top alternative (`bench quality --logprobs`): the record keeps
    # the first token's fingerprint, so two runs can be compared token by token where they stream the same.
    logprobs: bool = False


class Session:
    """What every request of a level shares: the endpoint's kept-alive connections and its request heads
    (built once). `api_key` goes into the Authorization header and nowhere else."""

    def __init__(self, options: ClientOptions) -> None:
        self.pool = ConnectionPool(options.base_url)
        headers = {"Content-Type": "application/json", "Accept": "*/*", "User-Agent": "llm-selfhost-bench"}
        if options.api_key:
            headers["Authorization"] = f"Bearer {options.api_key}"
        base = options.base_url.rstrip("/")
        self.heads = {api: request_head("POST", URL(base + path), headers) for api, path in API_PATHS.items()}

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.pool.close()


def open_session(options: ClientOptions) -> Session:
    """One session per level: connections are opened by its first requests and kept for the rest."""
    return Session(options)


def build_body(spec: RequestSpec, options: ClientOptions) -> bytes:
    body: dict[str, Any] = {"model": spec.adapter or options.model, "max_tokens": spec.max_tokens, "stream": True}
    if spec.api == "chat":
        body["messages"] = spec.messages()
    else:
        body["prompt"] = spec.completion_prompt()
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if options.logprobs:
        body.update({"logprobs": True, "top_logprobs": 1} if spec.api == "chat" else {"logprobs": 1})
    if spec.structure is not None:
        body.update(spec.structure.body_fields())
    body["stream_options"] = {"include_usage": True}
    if not options.strict_openai:
        body["stream_options"]["continuous_usage_stats"] = True
        if options.ignore_eos and spec.structure is None:  # a shaped answer ends when its shape is complete
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
    session: Session,
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
    body = build_body(spec, options)
    record.max_tokens = spec.max_tokens
    deadline_s = clock() + options.request_timeout_s
    record.attempts = 0
    while True:
        started_s = clock()
        _start_attempt(record, started_s)
        asked_wait_s = await _send_once(session, spec.api, body, options, record, clock, keep_text,
                                        deadline_s - started_s)
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
        await _sleep_until(clock, clock() + wait_s)
    record.end_s = clock()
    return record


async def _sleep_until(clock: Callable[[], float], due_s: float) -> None:
    """Wait until `due_s` on `clock`: a timer may fire early by up to a millisecond (uvloop's clock counts whole
    milliseconds, read at the loop's last pass), and a server's Retry-After is a floor."""
    while (left_s := due_s - clock()) > 0:
        await asyncio.sleep(max(left_s, 0.0005))


def _start_attempt(record: RequestRecord, now_s: float) -> None:
    """A fresh try: nothing of a throttled one stays (a rate-limit event may come after some chunks)."""
    record.dispatch_s = record.send_s = now_s
    record.chunk_times_s, record.chunk_tokens = [], []
    record.first_visible_s = record.http_status = record.error_kind = record.error_message = None
    record.first_token_sha256 = None
    record.ok = False


async def _send_once(
    session: Session, api: str, body: bytes, options: ClientOptions, record: RequestRecord,
    clock: Callable[[], float], keep_text: bool, timeout_s: float,
) -> float | None:
    """One try, within `timeout_s`; returns a 429's Retry-After. A kept-alive connection the server had
    already closed (llama.cpp's server closes idle ones) answered nothing, so the request goes again at once
    on a new connection, as HTTP clients do (another idle one may be as stale, and one may have come back to
    the pool meanwhile); a failure on a new connection is never retried."""
    stream = _StreamState(record, keep_text, options.logprobs)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    max_attempts = 2
    for attempt in range(1, max_attempts + 1):
        record.attempts += 1
        try:
            await _exchange(session, api, body, stream, clock, deadline, reuse=attempt == 1)
        except StreamFailure as failure:
            stream.fail(failure.kind, str(failure), failure.http_status)
            return failure.retry_after_s
        except asyncio.TimeoutError:
            stream.fail("timeout", f"no complete answer within {options.request_timeout_s:g} s")
        except ConnectionLost as lost:
            if attempt < max_attempts and lost.on_reused and not lost.had_status:
                continue
            stream.fail("stream_cut" if lost.had_status else "connection_error", str(lost))
        except InvalidResponse as exc:
            stream.fail("invalid_response", str(exc))
        except OSError as exc:  # refused, unreachable, name not found, TLS
            pool = session.pool
            stream.fail("connection_error", f"cannot connect to {pool.host}:{pool.port}: {type(exc).__name__}: {exc}")
        return None
    return None


async def _exchange(
    session: Session, api: str, body: bytes, stream: _StreamState, clock: Callable[[], float], deadline: float,
    reuse: bool = True,
) -> None:
    """One request on a kept-alive connection (or a new one, its set-up timed: always when `reuse` is off), its
    answer read into `stream` as it arrives; raises what ended it early. `deadline` is on the loop's clock."""
    loop = asyncio.get_running_loop()
    record = stream.record
    connection = session.pool.take_idle() if reuse else None
    if connection is None:
        started = time.perf_counter()
        connection = await asyncio.wait_for(session.pool.open(), max(deadline - loop.time(), 0.0))
        record.connect_ms = (time.perf_counter() - started) * 1000  # DNS, TCP connect, TLS handshake
    exchange = connection.send(session.heads[api](len(body)) + body, stream)
    record.send_s = clock()
    stream.begin(time.perf_counter() - clock() + record.send_s)
    timer = loop.call_at(deadline, connection.time_out)
    try:
        await exchange.outcome
    except asyncio.CancelledError:
        connection.abort()  # the answer is no longer wanted: the connection can't serve another
        raise
    finally:
        timer.cancel()
    stream.end(clock() - record.send_s)


def _backoff_s(num_throttled: int) -> float:
    return THROTTLE_BACKOFF_S[min(num_throttled, len(THROTTLE_BACKOFF_S)) - 1]


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """The wait a 429 asks for: `retry-after-ms` (OpenAI's), else `Retry-After` in seconds or as an HTTP date.
    `headers`: a case-insensitive mapping."""
    exact = headers.get("retry-after-ms")
    try:
        if exact is not None:
            return max(0.0, float(exact) / 1000)
    except ValueError:
        pass
    value = headers.get("retry-after")
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


def _http_failure(status: int, headers: CIMultiDict[str], raw: bytes) -> StreamFailure:
    message = raw.decode("utf-8", "replace").strip()
    try:
        message = orjson.loads(raw)["error"]["message"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        pass
    if status == 429:
        wait_s = retry_after_s(headers)
        suffix = f" (retry after {wait_s:g} s)" if wait_s is not None else ""
        return StreamFailure("throttled", f"HTTP 429: {message}{suffix}", 429, wait_s)
    return StreamFailure("http_error", f"HTTP {status}: {message}", status)


def _count_or_none(value: Any) -> int | None:
    """A count a server said, if it is one (an answer is hostile: anything else is not kept)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**40 else None


def _is_rate_limit(error: Any) -> bool:
    """A provider's rate-limit error sent as an event (after the 200 was already sent)."""
    if not isinstance(error, dict):
        return "rate limit" in str(error).lower()
    code = error.get("code")
    return (code in (429, "429", "rate_limit_exceeded") or error.get("type") in RATE_LIMIT_ERROR_TYPES
            or "rate limit" in str(error.get("message", "")).lower())


def first_token_sha256(logprobs: dict[str, Any]) -> str | None:
    """The fingerprint of the first token a chunk's logprobs name: chat's `content[0].token`, or completions'
    `tokens[0]`; None when they name none."""
    content = logprobs.get("content")
    token = content[0].get("token") if content else (logprobs.get("tokens") or [None])[0]
    return hashlib.sha256(token.encode("utf-8")).hexdigest() if isinstance(token, str) else None


class _StreamState:
    """Accumulates one stream's chunks into its record: the `BodyReader` of its exchange (`loadgen.http1`),
    given each piece of the answer with the time its socket read it."""

    def __init__(self, record: RequestRecord, keep_text: bool = False, logprobs: bool = False) -> None:
        self.record = record
        self.wants_first_token = logprobs  # asked for logprobs, and no token read yet: looked at once, not per chunk
        self.parser = SSEParser()
        self.status: int | None = None
        self.headers: CIMultiDict[str] = CIMultiDict()
        self.error_body = b""
        self.send_perf_s = 0.0  # the request's send time on perf_counter, which stamps the reads
        self.text_parts: list[str] | None = [] if keep_text else None
        self.tool_calls: ToolCallParts | None = ToolCallParts() if keep_text else None
        self.done = False
        self.saw_finish_reason = False
        self.chunk_chars: list[int] = []
        self.reasoning_chunks: list[int] = []  # indices of the chunks that carried reasoning, not content
        self.usage_deltas: list[int] = []
        self.last_usage_tokens = 0
        self.has_continuous_usage = True
        self.usage: dict[str, Any] | None = None  # the last usage the server sent
        self.server_output_tokens: int | None = None  # its completion_tokens
        self.server_reasoning_tokens: int | None = None

    def begin(self, send_perf_s: float) -> None:
        """The request has left (at `send_perf_s`, on perf_counter): an answer to it may now arrive."""
        self.send_perf_s = send_perf_s
        self.parser = SSEParser()
        self.status, self.error_body = None, b""

    def on_head(self, status: int, headers: CIMultiDict[str]) -> None:
        self.status = self.record.http_status = status
        self.headers = headers

    def on_body(self, data: bytes, read_s: float) -> bool:
        if self.status != 200:  # an error's message, enough of it to say what went wrong
            self.error_body += data
            return len(self.error_body) >= MAX_ERROR_BODY_BYTES
        arrived_s = read_s - self.send_perf_s
        lone = self.parser.lone_data(data)
        if lone is not None:
            self.on_event(None, lone, arrived_s)
            return self.done
        for event in self.parser.feed(data):
            self.on_event(event.event, event.data, arrived_s)
            if self.done:
                return True
        return False

    def end(self, now_s: float) -> None:
        """The answer is complete (or the reader had all it needed): judge it. `now_s` is since the send."""
        if self.status != 200:
            assert self.status is not None
            raise _http_failure(self.status, self.headers, self.error_body[:MAX_ERROR_BODY_BYTES])
        if not self.done:  # a last event without the blank line after it
            for event in self.parser.flush():
                self.on_event(event.event, event.data, now_s)
        self.finish()

    def on_event(self, event_name: str | None, data: bytes, arrived_s: float) -> None:
        """One event's data. Runs for every streamed chunk, inside the socket read: plain lookups, no calls
        it can do without; the usage's details are read once, at the end (`_take_usage`)."""
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
        usage = payload.get("usage")
        if usage:
            self.usage = usage
            completion = usage.get("completion_tokens")
            if completion is not None:
                self.server_output_tokens = completion
        timings = payload.get("timings")
        if timings and isinstance(timings, dict) and "draft_n" in timings:  # llama.cpp's, per request
            self.record.draft_tokens = _count_or_none(timings.get("draft_n"))
            self.record.accepted_draft_tokens = _count_or_none(timings.get("draft_n_accepted"))
        metrics = payload.get("metrics")
        if metrics and isinstance(metrics, dict):  # vLLM's, with --per-request-spec-decode-metrics
            self._take_spec_metrics(metrics.get("speculative_decoding"))
        choices = payload.get("choices")
        if not choices:
            return
        choice = choices[0]
        text = ""
        is_reasoning = is_tool_call = False
        delta = choice.get("delta")
        if delta:
            text = delta.get("content")
            if not text:
                text = delta.get("reasoning_content") or delta.get("reasoning")
                is_reasoning = bool(text)
            if not text and delta.get("tool_calls"):  # a call's name and arguments are generated tokens too
                text = self._tool_call_text(delta["tool_calls"])
                is_tool_call = True
        text = text or choice.get("text")
        if choice.get("finish_reason"):
            self.saw_finish_reason = True
            self.record.finish_reason = choice["finish_reason"]
        if not text:
            return
        if not usage:
            self.has_continuous_usage = False
        record = self.record
        if is_reasoning:
            self.reasoning_chunks.append(len(self.chunk_chars))
        elif record.first_visible_s is None:
            record.first_visible_s = arrived_s
        record.chunk_times_s.append(arrived_s)
        self.chunk_chars.append(len(text))
        if self.text_parts is not None and not is_tool_call:
            self.text_parts.append(text)
        if self.wants_first_token and choice.get("logprobs"):
            record.first_token_sha256 = first_token_sha256(choice["logprobs"])
            self.wants_first_token = record.first_token_sha256 is None
        current = self.server_output_tokens or 0
        self.usage_deltas.append(current - self.last_usage_tokens)
        self.last_usage_tokens = current

    def _take_spec_metrics(self, spec: Any) -> None:
        """vLLM's per-request `metrics.speculative_decoding` (on the usage chunk): its drafted and accepted tokens."""
        if isinstance(spec, dict) and "num_draft_tokens" in spec:
            self.record.draft_tokens = _count_or_none(spec.get("num_draft_tokens"))
            self.record.accepted_draft_tokens = _count_or_none(spec.get("num_accepted_draft_tokens"))

    def _tool_call_text(self, delta_calls: Any) -> str:
        if self.tool_calls is not None:
            return self.tool_calls.add(delta_calls)
        return ToolCallParts().add(delta_calls)

    def _take_usage(self) -> None:
        """The server's last usage report, as the record keeps it."""
        record, usage = self.record, self.usage
        record.server_output_tokens = self.server_output_tokens
        if usage is None:
            return
        record.prompt_tokens = usage.get("prompt_tokens", record.prompt_tokens)
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            record.cached_tokens = details["cached_tokens"]
        reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
        if reasoning is not None:
            self.server_reasoning_tokens = reasoning

    def finish(self) -> None:
        record = self.record
        self._take_usage()
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
        if self.tool_calls is not None and (calls := self.tool_calls.calls()):
            record.output_tool_calls = [{"name": call.name, "arguments": call.arguments} for call in calls]
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
        self._take_usage()
        record.ok = False
        record.error_kind = kind
        record.error_message = message[:500]
        if http_status is not None:
            record.http_status = http_status
        record.output_tokens = len(record.chunk_times_s)
        record.chunk_tokens = [1] * len(record.chunk_times_s)
