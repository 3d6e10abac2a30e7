"""An endpoint that never ends an event: the SSE parser holds at most MAX_EVENT_BYTES of it, and the request fails
with an error that names the limit, against a real aiohttp server that streams bytes with no event terminator."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from loadgen.client import ClientOptions, open_session, send_request
from loadgen.sse import MAX_EVENT_BYTES, EventTooLarge, SSEEvent, SSEParser
from loadgen.types import RequestRecord, RequestSpec

PIECE = b"x" * 65536
MOST_SENT = 64 * MAX_EVENT_BYTES  # the server's own bound: the test ends whatever the client does
SENT = web.AppKey("sent", list)


def test_an_unfinished_event_past_the_limit_is_refused_and_a_large_finished_one_is_read() -> None:
    parser = SSEParser()
    parser.feed(b"data: ")
    with pytest.raises(EventTooLarge, match="MAX_EVENT_BYTES"):
        for _ in range(MAX_EVENT_BYTES // len(PIECE) + 2):
            parser.feed(PIECE)
    big = b"data: " + b"y" * (MAX_EVENT_BYTES - 100)
    parser = SSEParser()
    assert parser.feed(big[:500_000]) == [] and parser.feed(big[500_000:] + b"\n\n") == [SSEEvent(None, big[6:])]


async def endless_event(request: web.Request) -> web.StreamResponse:
    """An OpenAI-looking stream whose first event never ends: `data: xxxx...` and no blank line, ever."""
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    sent = 0
    try:
        await response.write(b"data: ")
        while sent < MOST_SENT:
            await response.write(PIECE)
            sent += len(PIECE)
        await asyncio.sleep(30)
    except (ConnectionError, asyncio.CancelledError):  # the client let go
        pass
    request.app[SENT].append(sent)
    return response


@pytest.mark.timeout(120)
def test_a_stream_that_never_ends_its_event_fails_its_request_naming_the_limit() -> None:
    async def main() -> tuple[RequestRecord, list[int]]:
        app = web.Application()
        app[SENT] = []
        app.router.add_post("/v1/chat/completions", endless_event)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        options = ClientOptions(f"http://127.0.0.1:{port}/v1", "m", request_timeout_s=60)
        try:
            async with open_session(options) as session:
                record = RequestRecord("t", "e", "c1", request_id=0, send_s=0.0)
                await send_request(session, RequestSpec(0, "chat", "hi", 8), options, record, time.perf_counter)
        finally:
            await runner.cleanup()
        return record, app[SENT]

    record, sent = asyncio.run(main())
    assert not record.ok and record.error_kind == "invalid_response"  # not a timeout: the limit ended it
    assert record.error_message is not None and "MAX_EVENT_BYTES" in record.error_message
    assert f"{MAX_EVENT_BYTES:,} bytes" in record.error_message
    assert sent and sent[0] < MOST_SENT  # the client let go: the server's writes failed long before its end
