"""An incremental parser for Server-Sent Events. No I/O: feed it bytes as they arrive.

It handles events split across reads, several events in one read, LF / CRLF / CR line endings,
comment and keep-alive lines (`: ping`), multi-line `data:` fields and named events (`event: error`).
The common case, one `data: {...}` line per event, takes a fast path: this runs once per streamed
token, so it is the load generator's hottest code. An event still unfinished past MAX_EVENT_BYTES (an endpoint
that never ends one) fails its request (`EventTooLarge`, an invalid response naming the limit) instead of
holding ever more memory.
"""

from __future__ import annotations

from typing import NamedTuple

from loadgen.http1 import InvalidResponse

MAX_EVENT_BYTES = 1 << 20  # one event, unfinished: a token's chunk is a few hundred bytes


class EventTooLarge(InvalidResponse):
    """An event that grew past MAX_EVENT_BYTES without its blank line: the stream is not one to read."""


class SSEEvent(NamedTuple):
    event: str | None  # None for the default "message" event
    data: bytes


class SSEParser:
    def __init__(self) -> None:
        self._buffer = b""

    def lone_data(self, chunk: bytes) -> bytes | None:
        """The data of `chunk` when it is one whole `data:` event and nothing is held from earlier reads (what
        a server sends per token: the fast path, a few byte scans); None otherwise (then `feed` it)."""
        if (chunk.startswith(b"data: ") and chunk.find(b"\n") == len(chunk) - 2 and chunk.endswith(b"\n")
                and not self._buffer and chunk.find(b"\r") < 0):
            return chunk[6:-2]
        return None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Add bytes from the wire; return the events they complete (maybe none)."""
        lone = self.lone_data(chunk)
        if lone is not None:
            return [SSEEvent(None, lone)]
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            buffer = self._normalize_newlines(buffer)
        if b"\n\n" not in buffer:
            self._buffer = _held(buffer)
            return []
        *blocks, rest = buffer.split(b"\n\n")
        self._buffer = _held(rest)
        events = []
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:
                events.append(SSEEvent(None, block[6:]))
            elif block:
                event = _parse_block(block)
                if event is not None:
                    events.append(event)
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: a last event not followed by a blank line still counts."""
        block = self._buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n").strip(b"\n")
        self._buffer = b""
        event = _parse_block(block) if block else None
        return [event] if event is not None else []

    def _normalize_newlines(self, buffer: bytes) -> bytes:
        # A CR at the very end may be the first half of a CRLF split across reads: keep it for later.
        held = b""
        if buffer.endswith(b"\r"):
            buffer, held = buffer[:-1], b"\r"
        buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        return buffer + held


def _held(unfinished: bytes) -> bytes:
    """What is kept for the next read: an event not yet ended, within the limit."""
    if len(unfinished) > MAX_EVENT_BYTES:
        raise EventTooLarge(f"a server-sent event passed {MAX_EVENT_BYTES:,} bytes (MAX_EVENT_BYTES) without ending "
                            "(no blank line after it): the stream was dropped")
    return unfinished


def _parse_block(block: bytes) -> SSEEvent | None:
    """Parse one event block (lines without the blank terminator). Comment-only blocks give None."""
    event_name: str | None = None
    data_lines: list[bytes] = []
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            data_lines.append(value)
        elif name == b"event":
            event_name = value.decode("utf-8", "replace")
    if not data_lines:
        return None
    return SSEEvent(event_name, b"\n".join(data_lines))
