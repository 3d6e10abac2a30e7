"""HTTP/1.1 exchanges on kept-alive connections, each answer's body handed to its reader with its read times.

A connection is an asyncio protocol with httptools' parser (llhttp, the parser of Node.js and uvicorn).
Every socket read is stamped with the clock and queued (`ReadBacklog`); the queue is parsed in short slices
between the loop's reads, and each piece of body goes to the exchange's `BodyReader` with the moment it was
read. No task is woken per chunk: the task that sent the request wakes once, when the answer is complete.

That is the load generator's hot path. aiohttp, which it used before, buffers each chunk and wakes the
reading task for it; at 1,000 streams on one core that alone took more of the core than everything else
the client does with a token, and the loop ran late enough to stamp tokens late
(`benchmarks/loadgen_vs_raw.py` measures `bench sweep` against a bare socket client).

What it deliberately leaves out, being for a load generator that POSTs to one endpoint: redirects,
proxies, cookies, compression (it never asks for any), HTTP/2 and request pipelining.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import Callable
from typing import Protocol

import httptools
from multidict import CIMultiDict
from yarl import URL

SLICE_S = 0.0001  # the longest the parsing of queued reads holds the loop before it reads its sockets again


class BodyReader(Protocol):
    """Takes one answer, piece by piece in the order read. A method that raises ends the exchange with that
    exception."""

    def on_head(self, status: int, headers: CIMultiDict[str]) -> None:
        """The status line and headers are in."""

    def on_body(self, data: bytes, read_s: float) -> bool:
        """A piece of the body, read from the socket at `read_s` (perf_counter). True: the reader has all it
        needs (an SSE `[DONE]`), so the exchange ends here; the rest of the body is read and dropped."""


class ConnectionLost(Exception):
    """The connection closed before the answer was complete."""

    def __init__(self, message: str, had_status: bool, on_reused: bool) -> None:
        super().__init__(message)
        self.had_status = had_status  # the status line had come: the answer was cut, not refused
        self.on_reused = on_reused  # on a connection that had served an earlier exchange


class Exchange:
    """One request on one connection and its outcome, set once: done, or failed with an exception."""

    __slots__ = ("reader", "outcome", "status", "wants_more")

    def __init__(self, reader: BodyReader, outcome: asyncio.Future[None]) -> None:
        self.reader = reader
        self.outcome = outcome
        self.status: int | None = None
        self.wants_more = True  # False once the reader has all it needs

    def finish(self, failure: BaseException | None = None) -> None:
        self.wants_more = False
        if not self.outcome.done():
            if failure is None:
                self.outcome.set_result(None)
            else:
                self.outcome.set_exception(failure)


class Connection(asyncio.Protocol):
    """One kept-alive connection: at most one exchange at a time, handed back to its pool once the answer
    is complete and the server keeps the connection open."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.num_exchanges = 0
        self.read_s = 0.0
        self.header_pairs: list[tuple[str, str]] = []
        self.body_until_close = False
        self.lost_with: Exception | None = None
        self.queue_read = pool.backlog.add

    @property
    def is_reused(self) -> bool:
        return self.num_exchanges > 1

    def send(self, request: bytes, reader: BodyReader) -> Exchange:
        assert self.transport is not None and self.exchange is None
        self.exchange = Exchange(reader, asyncio.get_running_loop().create_future())
        self.num_exchanges += 1
        self.transport.write(request)
        return self.exchange

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def time_out(self) -> None:
        """The exchange's time is up: it fails with TimeoutError, and the connection is dropped."""
        self._fail(asyncio.TimeoutError())

    # asyncio's side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.queue_read(self, time.perf_counter(), data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost_with = exc
        self.queue_read(self, time.perf_counter(), None)  # after the reads before it

    def parse(self, read_s: float, data: bytes | None) -> None:
        """A read taken from the backlog, in the order the socket gave them; None: the connection is lost."""
        if data is None:
            self._lost(self.lost_with)
            return
        self.read_s = read_s
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # the reader raised: the exchange ends with it
            self._fail(exc.__context__ or exc)
        except httptools.HttpParserError as exc:
            self._fail(InvalidResponse(f"not a valid HTTP/1.1 answer: {exc}"))

    def _lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.pool.forget(self)
        exchange = self.exchange
        if exchange is None:
            return
        self.exchange = None
        if exchange.status is not None and self.body_until_close:
            exchange.finish()  # a body without length or chunks ends when the connection does
            return
        why = f": {exc}" if exc else ""
        exchange.finish(ConnectionLost(f"the server closed the connection{why}", exchange.status is not None,
                                       self.is_reused))

    # httptools' side
    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_pairs.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        exchange = self.exchange
        headers: CIMultiDict[str] = CIMultiDict(self.header_pairs)
        self.header_pairs = []
        self.body_until_close = "content-length" not in headers and "chunked" not in headers.get(
            "transfer-encoding", "")
        if exchange is None:
            return
        exchange.status = self.parser.get_status_code()
        exchange.reader.on_head(exchange.status, headers)

    def on_body(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is not None and exchange.wants_more and exchange.reader.on_body(data, self.read_s):
            exchange.finish()

    def on_message_complete(self) -> None:
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.finish()
        if self.transport is None:
            return
        if exchange is None or not self.parser.should_keep_alive():  # an answer nobody asked for: drop it
            self.transport.close()
        else:
            self.pool.put(self)

    def _fail(self, failure: BaseException) -> None:
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.finish(failure)
        self.abort()  # the rest of the answer is never read: the connection can't serve another


class ReadBacklog:
    """The reads of every connection of a pool, stamped, waiting to be parsed. A socket's callback only
    stamps and queues its read; the queue is parsed in slices of at most SLICE_S, one per pass of the event
    loop, so between slices the loop reads (and stamps) whatever arrived meanwhile. A read then waits for at
    most one slice instead of behind the parsing of every read before it in the same pass: at 1,000 streams
    on one core that wait was the client's whole error at p99."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.reads: collections.deque[tuple[Connection, float, bytes | None]] = collections.deque()
        self.is_armed = False

    def add(self, connection: Connection, read_s: float, data: bytes | None) -> None:
        self.reads.append((connection, read_s, data))
        if not self.is_armed:
            self.is_armed = True
            self.loop.call_soon(self.parse_slice)

    def parse_slice(self) -> None:
        reads = self.reads
        until_s = time.perf_counter() + SLICE_S
        while reads:
            connection, read_s, data = reads.popleft()
            connection.parse(read_s, data)
            if time.perf_counter() > until_s:
                break
        if reads:
            self.loop.call_soon(self.parse_slice)
        else:
            self.is_armed = False


class InvalidResponse(Exception):
    """The server's bytes are not HTTP/1.1."""


class ConnectionPool:
    """The kept-alive connections to one endpoint, opened as they are needed (one per request in flight:
    a closed loop of N users holds N) and all closed together."""

    def __init__(self, base_url: str, ssl_context: ssl.SSLContext | None = None) -> None:
        url = URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base URL must be http://HOST[:PORT]/... or https://..., got {base_url!r}")
        self.host, self.port, self.is_tls = url.host, url.port or (443 if url.scheme == "https" else 80), \
            url.scheme == "https"
        self.ssl_context = (ssl_context or ssl.create_default_context()) if self.is_tls else None
        self.idle: list[Connection] = []
        self.all: set[Connection] = set()
        self.backlog = ReadBacklog(asyncio.get_running_loop())

    @property
    def num_idle(self) -> int:
        return len(self.idle)

    def take_idle(self) -> Connection | None:
        while self.idle:
            connection = self.idle.pop()
            if connection.transport is not None and not connection.transport.is_closing():
                return connection
        return None

    async def open(self) -> Connection:
        """A new connection (name resolution, TCP connect, and the TLS handshake for https)."""
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(
            lambda: Connection(self), self.host, self.port, ssl=self.ssl_context,
            server_hostname=self.host if self.is_tls else None)
        self.all.add(connection)
        return connection

    def put(self, connection: Connection) -> None:
        self.idle.append(connection)

    def forget(self, connection: Connection) -> None:
        self.all.discard(connection)
        if connection in self.idle:
            self.idle.remove(connection)

    def close(self) -> None:
        for connection in list(self.all):
            connection.abort()
        self.idle.clear()


def request_head(method: str, url: URL, headers: dict[str, str]) -> Callable[[int], bytes]:
    """The request line and headers, built once per endpoint; the call adds Content-Length for a body."""
    name = f"[{url.host}]" if url.host and ":" in url.host else url.host
    host = name if url.is_default_port() else f"{name}:{url.port}"
    lines = [f"{method} {url.raw_path_qs} HTTP/1.1", f"Host: {host}",
             *(f"{name}: {value}" for name, value in headers.items())]
    head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
    return lambda length: head + b"%d\r\n\r\n" % length
