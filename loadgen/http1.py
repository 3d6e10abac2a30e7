"""HTTP/1.1 exchanges on kept-alive connections, each answer's body handed to its reader inside the read.

A connection is an asyncio protocol with httptools' parser (llhttp, the parser of Node.js and uvicorn):
every socket read is stamped with the clock, parsed in C, and each piece of body goes straight to the
exchange's `BodyReader` with the moment it was read. No buffer sits between the socket and the reader, and
no task is woken per chunk: the task that sent the request wakes once, when the answer is complete.

That is the load generator's hot path. aiohttp, which it used before, buffers each chunk and wakes the
reading task for it; at 1,000 streams on one core that alone took more of the core than everything else
the client does with a token, and the loop ran late enough to stamp tokens late
(`benchmarks/loadgen_accuracy.py` measures both against a bare socket client).

What it deliberately leaves out, being for a load generator that POSTs to one endpoint: redirects,
proxies, cookies, compression (it never asks for any), HTTP/2 and request pipelining.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from typing import Protocol

import httptools
from multidict import CIMultiDict
from yarl import URL


class BodyReader(Protocol):
    """Takes one answer as it arrives. A method that raises ends the exchange with that exception."""

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
        self.read_s = time.perf_counter()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # the reader raised: the exchange ends with it
            self._fail(exc.__context__ or exc)
        except httptools.HttpParserError as exc:
            self._fail(InvalidResponse(f"not a valid HTTP/1.1 answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
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
        if self.parser.should_keep_alive() and self.transport is not None:
            self.pool.put(self)
        elif self.transport is not None:
            self.transport.close()

    def _fail(self, failure: BaseException) -> None:
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.finish(failure)
        self.abort()  # the rest of the answer is never read: the connection can't serve another


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
