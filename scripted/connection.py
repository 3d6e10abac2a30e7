"""One accepted socket, read with the kernel's receive time of every read (`SO_TIMESTAMPNS`, on Linux) and
written directly; what it reads goes to a `Receiver` (scripted/protocol.py parses it).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from typing import Protocol


class Receiver(Protocol):
    """What a connection's bytes go to (scripted/protocol.py `ScriptedProtocol`)."""

    def connection_made(self, transport: Connection) -> None: ...

    def data_received(self, data: bytes, arrived: float) -> None: ...

    def connection_lost(self) -> None: ...


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

    def __init__(self, sock: socket.socket, protocol: Receiver, loop: asyncio.AbstractEventLoop) -> None:
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
