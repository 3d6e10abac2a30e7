"""The SSE parser: events are found whatever way the bytes are cut into reads."""

from __future__ import annotations

import pytest

from loadgen.sse import SSEEvent, SSEParser

STREAM = b'data: {"a": 1}\n\ndata: {"a": 2}\n\n: keep-alive\n\nevent: error\ndata: {"error": "x"}\n\ndata: [DONE]\n\n'
EXPECTED = [
    SSEEvent(None, b'{"a": 1}'),
    SSEEvent(None, b'{"a": 2}'),
    SSEEvent("error", b'{"error": "x"}'),
    SSEEvent(None, b"[DONE]"),
]


def feed_in_pieces(data: bytes, size: int) -> list[SSEEvent]:
    parser = SSEParser()
    events = []
    for start in range(0, len(data), size):
        events += parser.feed(data[start : start + size])
    return events + parser.flush()


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, 1000])
def test_events_survive_any_split_into_reads(size: int) -> None:
    assert feed_in_pieces(STREAM, size) == EXPECTED


@pytest.mark.parametrize("size", [1, 2, 5, 1000])
def test_crlf_and_bare_cr_line_endings_parse_like_lf(size: int) -> None:
    assert feed_in_pieces(STREAM.replace(b"\n", b"\r\n"), size) == EXPECTED
    assert feed_in_pieces(STREAM.replace(b"\n", b"\r"), size) == EXPECTED


def test_several_events_in_one_read_come_out_in_order() -> None:
    assert SSEParser().feed(STREAM) == EXPECTED


def test_comments_and_keepalives_alone_produce_no_event() -> None:
    parser = SSEParser()
    assert parser.feed(b": ping\n\n:\n\n\n\n") == []
    assert parser.flush() == []


def test_multiline_data_is_joined_with_newlines() -> None:
    assert SSEParser().feed(b"data: line one\ndata: line two\n\n") == [SSEEvent(None, b"line one\nline two")]


def test_data_without_space_after_colon_is_accepted() -> None:
    assert SSEParser().feed(b"data:{}\n\n") == [SSEEvent(None, b"{}")]


def test_incomplete_event_waits_for_its_terminator() -> None:
    parser = SSEParser()
    assert parser.feed(b'data: {"partial": ') == []
    assert parser.feed(b"1}\n") == []
    assert parser.feed(b"\n") == [SSEEvent(None, b'{"partial": 1}')]


def test_last_event_without_blank_line_is_delivered_on_flush() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: [DONE]") == []
    assert parser.flush() == [SSEEvent(None, b"[DONE]")]


def test_lines_with_unknown_fields_are_ignored() -> None:
    assert SSEParser().feed(b"id: 7\nretry: 100\ndata: x\n\nid: 8\n\n") == [SSEEvent(None, b"x")]
