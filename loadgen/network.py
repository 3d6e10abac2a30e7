"""How far the endpoint is: TCP connect and TLS handshake times, measured apart, before a level starts.

A remote provider's TTFT is network plus server. The records carry each new connection's set-up as the
client made it (`connect_ms`, DNS, TCP and TLS together); this probe splits it, with its own fresh
connections: the name is resolved once, then each try connects to the address (TCP), and for https a
second connection also completes a handshake (TLS = that time minus the TCP time). The fastest of a few
tries is kept: the network's floor, not its queueing.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass

from yarl import URL

PROBE_TRIES = 3
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ConnectProbe:
    tcp_ms: float
    tls_ms: float | None = None  # https only


async def probe_connect(base_url: str, tries: int = PROBE_TRIES, timeout_s: float = PROBE_TIMEOUT_S,
                        context: ssl.SSLContext | None = None) -> ConnectProbe | None:
    """None when the endpoint can't be reached within `timeout_s` (the level's requests will say why).
    `context`: the TLS settings for https (default: the system's, verifying the certificate as a client does)."""
    url = URL(base_url)
    if url.host is None or url.port is None:
        return None
    context = context or (ssl.create_default_context() if url.scheme == "https" else None)
    try:
        return await asyncio.wait_for(_probe(url.host, url.port, context, tries), timeout_s)
    except (OSError, asyncio.TimeoutError, ssl.SSLError):
        return None


async def _probe(host: str, port: int, context: ssl.SSLContext | None, tries: int) -> ConnectProbe:
    loop = asyncio.get_running_loop()
    address = (await loop.getaddrinfo(host, port, type=0, proto=6))[0][4]
    tcp = min([await _connect_s(address[0], port) for _ in range(tries)])
    if context is None:
        return ConnectProbe(tcp * 1000)
    with_tls = min([await _connect_s(address[0], port, context, host) for _ in range(tries)])
    return ConnectProbe(tcp * 1000, max(0.0, with_tls - tcp) * 1000)


async def _connect_s(address: str, port: int, context: ssl.SSLContext | None = None,
                     server_hostname: str | None = None) -> float:
    started = time.perf_counter()
    _, writer = await asyncio.open_connection(address, port, ssl=context, server_hostname=server_hostname)
    elapsed = time.perf_counter() - started
    writer.close()
    try:
        await writer.wait_closed()
    except (OSError, ssl.SSLError):
        pass
    return elapsed
