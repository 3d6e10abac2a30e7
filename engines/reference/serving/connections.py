"""Listening with a cap on open connections: an aiohttp site that answers one past the cap with a 503 and closes it.

Why here and not in a handler: a connection that never sends a request (or sends it a byte at a time) holds a
socket and a task without ever reaching a handler, so the cap is counted where connections are accepted.
aiohttp's own protocol serves every connection under the cap unchanged; this module knows nothing of the
engine or of the routes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import weakref
from collections.abc import Callable

from aiohttp import web

from engines.reference.serving.options import API_KEY_ENV

logger = logging.getLogger(__name__)

REFUSED_LINGER_S = 2.0  # a refused client gets this long to read the 503 before its socket is dropped


class _Counted(asyncio.Protocol):
    """aiohttp's protocol for one connection, passed everything; tells the site when the connection ends."""

    def __init__(self, inner: asyncio.Protocol, on_lost: Callable[[_Counted], None]) -> None:
        self.inner = inner
        self._on_lost = on_lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self.inner.connection_lost(exc)
        finally:
            self._on_lost(self)


class _Refused(asyncio.Protocol):
    """Writes the 503 at once, half-closes, and drops whatever the client sends until it closes (or lingers)."""

    def __init__(self, response: bytes) -> None:
        self._response = response
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(self._response)
        if transport.can_write_eof():
            transport.write_eof()
        # Reading on until the client closes: closing with its request unread would reset the connection, and
        # a reset can reach the client before the 503 does.
        self._timer = asyncio.get_running_loop().call_later(REFUSED_LINGER_S, transport.abort)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # the client is done: close

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()


def refusal(max_connections: int, flag: str) -> bytes:
    """The whole HTTP answer to a connection past the cap: 503, an OpenAI-style error naming the limit."""
    message = f"the server has {max_connections} connections open, its limit ({flag}); try again later"
    body = json.dumps({"error": {"message": message, "type": "server_error", "param": None,
                                 "code": "too_many_connections"}}).encode()  # fmt: skip
    head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\nRetry-After: 1\r\n\r\n")  # fmt: skip
    return head.encode() + body


class CappedSite(web.BaseSite):
    """A TCP site of `runner` on host:port that keeps at most `max_connections` connections open."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, max_connections: int, flag: str) -> None:
        super().__init__(runner)
        self.host, self.port, self.max_connections = host, port, max_connections
        self.num_refused = 0
        self._open: weakref.WeakSet[_Counted] = weakref.WeakSet()  # a connection never made is simply collected
        self._refusal = refusal(max_connections, flag)

    @property
    def name(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def num_open(self) -> int:
        return len(self._open)

    @property
    def connections(self) -> list[asyncio.Protocol]:
        """aiohttp's protocol of each open connection (its `transport` is the socket's)."""
        return [counted.inner for counted in self._open]

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._protocol, self.host, self.port, backlog=self._backlog)

    def _protocol(self) -> asyncio.Protocol:
        """Called as each connection is accepted (so the count is exact, however many arrive at once)."""
        if len(self._open) >= self.max_connections:
            self.num_refused += 1
            if self.num_refused == 1 or self.num_refused % 1000 == 0:
                logger.warning("refused a connection past the cap of %d (%d refused so far)", self.max_connections,
                               self.num_refused)  # fmt: skip
            return _Refused(self._refusal)
        server = self._runner.server
        assert server is not None
        counted = _Counted(server(), self._open.discard)
        self._open.add(counted)
        return counted


def drop_connection(request: web.BaseRequest) -> None:
    """Close a request's connection at once (its client stopped reading); aiohttp then cancels its handler."""
    if request.transport is not None:
        request.transport.abort()


def open_host_warning(addresses: list, key_env: str = API_KEY_ENV) -> str | None:
    """What to say when a server with no API key listens where other machines can reach it (None: loopback only)."""
    exposed = [address for address in addresses if not _is_loopback(address[0])]
    if not exposed:
        return None
    host, port = exposed[0][:2]
    return (f"warning: listening on {host} port {port} with no API key: anyone who can reach it can use the model. "
            f"Set {key_env} (or --api-key-env NAME) to require one, or bind 127.0.0.1.")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False
