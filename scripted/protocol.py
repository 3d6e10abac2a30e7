"""One HTTP/1.1 connection of a scripted server: requests parsed, the routes (`/health`, `/v1/models`, the
completions, and the server's own `/_script`, `/_sent`, `/_prompts`, `/_models`, `/_shapes`), the faults a completion is
answered with, and each stream's chunks written when due.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from dataclasses import asdict
from typing import Any

import orjson

from scripted.answers import ERROR_EVENT, RATE_LIMIT_EVENT, StreamPlan, instant_answer, prompt_words, whole_answer
from scripted.connection import Connection
from scripted.script import Fault, quiz_answer
from scripted.shapes import asks_for_shape, shaped_answer
from scripted.streams import ScriptState

STATUS_TEXT = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}


class ScriptedProtocol:
    """One HTTP/1.1 connection: parse requests, answer them on the script's schedule."""

    def __init__(self, state: ScriptState) -> None:
        self.state = state
        self.buffer = b""
        self.transport: Connection | None = None
        self.num_served = 0
        self.active: StreamPlan | None = None  # the stream this connection answers now

    def connection_made(self, transport: Connection) -> None:
        self.transport = transport

    def connection_lost(self) -> None:
        self.transport = None  # a chunk still planned finds no connection and is dropped
        if self.active is not None:
            self.state.release(self.active)  # its slot, if it held one, goes to the next request waiting

    def data_received(self, data: bytes, arrived: float) -> None:
        self.buffer += data
        self.handle_buffered(arrived)

    def handle_buffered(self, arrived: float) -> None:
        while self.transport is not None:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].decode("latin-1")
            length = _content_length(head)
            if len(self.buffer) < head_end + 4 + length:
                return
            body = self.buffer[head_end + 4 : head_end + 4 + length]
            self.buffer = self.buffer[head_end + 4 + length :]
            method, path = head.split(" ", 2)[:2]
            self.handle(method, path, body, arrived)

    def handle(self, method: str, path: str, body: bytes, arrived: float) -> None:
        script = self.state.script
        if method == "GET" and path == "/health":
            self.respond(200, b"ok", "text/plain")
        elif method == "GET" and path == "/v1/models":
            adapters = [{"id": name, "object": "model", "parent": script.model} for name in script.adapters]
            self.respond_json(200, {"object": "list", "data": [{"id": script.model, "object": "model"}, *adapters]})
        elif method == "GET" and path == "/_models":
            models, self.state.models = self.state.models, []
            self.respond_json(200, {"models": models})
        elif method == "GET" and path == "/metrics" and script.spec_tokens > 0:
            self.respond(200, self.state.spec.page(script.model), "text/plain; version=0.0.4")
        elif method == "GET" and path == "/_shapes":
            self.respond_json(200, self.state.shapes.report_and_clear())
        elif method == "GET" and path == "/_sent":
            self.respond_json(200, self.state.sent.report_and_clear())
        elif method == "GET" and path == "/_prompts":
            prompts, self.state.prompts = self.state.prompts, []
            self.respond_json(200, {"prompts": prompts})
        elif method == "PUT" and path == "/_script":
            try:
                self.state.update(orjson.loads(body))
                self.respond_json(200, asdict(self.state.script))
            except (ValueError, TypeError) as exc:
                self.respond_error(400, str(exc))
        elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            self.complete(orjson.loads(body), path.endswith("chat/completions"), arrived)
        else:
            self.respond_error(404, f"no route {method} {path}")

    def complete(self, body: dict[str, Any], is_chat: bool, arrived: float) -> None:
        script = self.state.script
        said = body.get("messages") if is_chat else body.get("prompt")
        self.state.prompts.append(hashlib.sha256(orjson.dumps(said)).hexdigest())
        self.state.models.append(body.get("model"))
        fault = script.fault if next(self.state.counter) % script.fault_every == 0 else "none"
        if body.get("model") != script.model and body.get("model") not in script.adapters:
            self.respond_error(404, f"model '{body.get('model')}' does not exist")
        elif fault == "http_500":
            self.respond_error(500, "scripted internal error")
        elif fault == "http_429":
            self.respond_error(429, "scripted rate limit", extra_headers="Retry-After: 2\r\n")
        elif (wait_s := self.state.bucket.take()) > 0:
            # Retry-After in whole seconds (HTTP's unit) and exact milliseconds, as OpenAI's API sends both.
            headers = f"Retry-After: {max(1, math.ceil(wait_s))}\r\nretry-after-ms: {wait_s * 1000:.0f}\r\n"
            self.respond_error(429, f"rate limit of {script.rate_limit_per_s:g} requests/s reached", headers,
                               error_type="rate_limit_exceeded")
        elif fault == "drop" or (fault == "drop_reused" and self.num_served > 0):
            assert self.transport is not None
            self.transport.close()
        elif not body.get("stream"):  # the whole answer at once (OpenAI's default; eval harnesses ask so), untimed
            self.num_served += 1
            self.respond_json(200, whole_answer(body, is_chat, script))
        else:
            self.num_served += 1
            self.stream(body, is_chat, fault, arrived)

    def stream(self, body: dict[str, Any], is_chat: bool, fault: Fault, arrived: float) -> None:
        assert self.transport is not None
        script = self.state.script
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        loop = asyncio.get_running_loop()
        offset_s = loop.time() - time.perf_counter()  # the loop's clock may differ from perf_counter
        plan = StreamPlan(body, script, is_chat, fault, arrived + offset_s)
        plan.cached_tokens = self.state.prefix_cache.cached_words(prompt_words(body))
        if script.right_share >= 0:
            plan.first_text = quiz_answer(body, script, self.state.streams_in_flight)
        if asks_for_shape(body):
            plan.take_shape(shaped_answer(body, self.state.shapes, script.valid_share))
        if script.ttft_ms == 0 and script.itl_ms == 0 and fault == "none" and not script.is_loaded \
                and not plan.cached_tokens and plan.first_text is None and not script.spec_tokens \
                and plan.shaped is None:
            self.transport.write(instant_answer(plan.num_tokens, plan.prompt_tokens, is_chat, script))
            return
        self.active = plan
        self.state.admit(self, plan)

    def send_planned(self, plan: StreamPlan, index: int) -> None:
        """Chunk `index` is due: write it, and plan the next one from this one's due time (so no drift)."""
        if self.transport is None:
            self.state.release(plan)
            return
        plan.note_sent(index, asyncio.get_running_loop().time(), self.state.sent)
        if plan.cuts_at(index):
            self.state.release(plan)
            self.transport.close()
        elif plan.errors_at(index):
            self.state.release(plan)
            self.write_chunk(RATE_LIMIT_EVENT if plan.fault == "rate_limit_event" else ERROR_EVENT)
            self.write_chunk(b"")
        elif index == plan.num_chunks - 1:
            self.note_spec(plan, index)
            self.state.release(plan)
            self.write_chunk(plan.event(index) + plan.tail())
            self.write_chunk(b"")
        else:
            self.note_spec(plan, index)
            self.write_chunk(plan.event(index))
            plan.next_due += plan.gap_s(index + 1, self.state.streams_in_flight)
            self.state.ticker.add(plan.next_due, self, plan, index + 1)

    def note_spec(self, plan: StreamPlan, index: int) -> None:
        if plan.script.spec_tokens > 0:
            self.state.spec.record(plan.tokens_in(index), plan.script.spec_tokens)

    def write_chunk(self, payload: bytes) -> None:
        assert self.transport is not None
        self.transport.write(b"%x\r\n%b\r\n" % (len(payload), payload))

    def respond(self, status: int, payload: bytes, content_type: str, extra_headers: str = "") -> None:
        assert self.transport is not None
        head = (
            f"HTTP/1.1 {status} {STATUS_TEXT.get(status, 'Error')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n{extra_headers}\r\n"
        )
        self.transport.write(head.encode() + payload)

    def respond_json(self, status: int, payload: Any) -> None:
        self.respond(status, orjson.dumps(payload), "application/json")

    def respond_error(self, status: int, message: str, extra_headers: str = "", error_type: str = "scripted") -> None:
        payload = {"error": {"message": message, "type": error_type, "code": status}}
        self.respond(status, orjson.dumps(payload), "application/json", extra_headers)



def _content_length(head: str) -> int:
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return int(value.strip())
    return 0
