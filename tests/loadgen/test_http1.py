"""The client's HTTP/1.1 against answers the scripted server never gives: a body that ends when the connection
does, one with a Content-Length, `Connection: close`, an answer nobody asked for, bytes that are not HTTP. Each
is a real socket server that writes the bytes given."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import orjson
from yarl import URL

from loadgen.client import ClientOptions, open_session, send_request
from loadgen.http1 import request_head
from loadgen.types import RequestRecord, RequestSpec

TOKENS = 3


def events(num_tokens: int = TOKENS) -> bytes:
    chunks = [{"choices": [{"index": 0, "delta": {"content": f" t{i}"}, "finish_reason": None}]}
              for i in range(num_tokens)]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def answer(head: str, body: bytes) -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{head}\r\n".encode() + body


async def serve(reply: Callable[[int], bytes], close_after: bool, connections: list[int],
                unasked: bytes | None = None) -> asyncio.Server:
    """Answers each request on a connection with `reply(n)` (n: the request's number on the server); closes the
    connection after it if `close_after`; or, once, writes `unasked` on the idle connection afterwards."""
    count = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count
        connections.append(len(connections))
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                await reader.readexactly(length)
                writer.write(reply(count))
                count += 1
                await writer.drain()
                if close_after:
                    break
                if unasked is not None and count == 1:
                    await asyncio.sleep(0.05)
                    writer.write(unasked)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def send_twice(reply: Callable[[int], bytes], close_after: bool = False,
               unasked: bytes | None = None) -> tuple[list[RequestRecord], int]:
    """Two requests, one after the other, on one session; the records and how many connections were opened."""
    async def main() -> tuple[list[RequestRecord], int]:
        connections: list[int] = []
        server = await serve(reply, close_after, connections, unasked)
        port = server.sockets[0].getsockname()[1]
        options = ClientOptions(f"http://127.0.0.1:{port}/v1", "m", request_timeout_s=5)
        records = []
        async with open_session(options) as session:
            for i in range(2):
                record = RequestRecord("t", "e", "c1", request_id=i, send_s=0.0)
                records.append(await send_request(session, RequestSpec(i, "chat", "hi", TOKENS), options, record,
                                                  time.perf_counter))
                await asyncio.sleep(0.1)  # an unasked answer arrives meanwhile
        server.close()
        await server.wait_closed()
        return records, len(connections)

    return asyncio.run(main())


def test_a_body_without_length_or_chunks_ends_when_the_server_closes() -> None:
    records, connections = send_twice(lambda n: answer("Connection: close\r\n", events()), close_after=True)
    assert all(r.ok and r.output_tokens == TOKENS for r in records), [r.error_message for r in records]
    assert connections == 2  # the server closed each: nothing was reused


def test_a_body_with_a_content_length_streams_and_the_connection_is_kept() -> None:
    body = events()
    records, connections = send_twice(lambda n: answer(f"Content-Length: {len(body)}\r\n", body))
    assert all(r.ok and r.output_tokens == TOKENS for r in records), [r.error_message for r in records]
    assert connections == 1
    assert records[0].connect_ms is not None and records[1].connect_ms is None  # the second rode the first's


def test_an_answer_nobody_asked_for_drops_the_connection_and_the_next_request_opens_one() -> None:
    """Some servers say 408 on an idle kept-alive connection before closing it: never an answer to the next
    request."""
    body = events()
    unasked = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n"
    records, connections = send_twice(lambda n: answer(f"Content-Length: {len(body)}\r\n", body), unasked=unasked)
    assert all(r.ok for r in records), [r.error_message for r in records]
    assert connections == 2 and records[1].connect_ms is not None


def test_bytes_that_are_not_http_are_an_invalid_response() -> None:
    records, _ = send_twice(lambda n: b"SSH-2.0-OpenSSH_9.2\r\n\r\n", close_after=True)
    assert [r.error_kind for r in records] == ["invalid_response", "invalid_response"]
    assert "not a valid HTTP/1.1 answer" in (records[0].error_message or "")


def test_the_request_head_names_the_host_as_http_wants_it() -> None:
    def head(url: str) -> bytes:
        return request_head("POST", URL(url), {"Content-Type": "application/json"})(12)

    assert head("http://127.0.0.1:8000/v1/chat/completions") == (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Type: application/json\r\n"
        b"Content-Length: 12\r\n\r\n")
    assert b"Host: api.example.com\r\n" in head("https://api.example.com/v1/completions")
    assert b"Host: [::1]:9000\r\n" in head("http://[::1]:9000/v1/completions")
