"""What one answer sends and when: a stream's plan (`StreamPlan`: chunk by chunk, its gaps, stall, cut or error
event), the answer of an untimed script in one write, a non-streamed completion, OpenAI's chunk and usage shapes.

It writes bytes and never a socket: scripted/protocol.py sends them when scripted/streams.py says they are due.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson

from scripted.script import Fault, Script, SentTiming, quiz_answer
from scripted.shapes import ShapedAnswer

ERROR_EVENT = b'data: {"error": {"message": "scripted failure", "code": 500}}\n\n'
RATE_LIMIT_EVENT = b'data: {"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded", "code": 429}}\n\n'


class StreamPlan:
    """What one answer sends and when: chunk 0 is due ttft after the stream starts, each next one a gap
    after the last (itl, plus itl_per_stream for each other stream then in flight, plus a stall once)."""

    def __init__(self, body: dict[str, Any], script: Script, is_chat: bool, fault: Fault,
                 arrived: float = 0.0) -> None:
        self.script = script
        self.is_chat = is_chat
        self.fault = fault
        self.arrived = arrived  # on the loop's clock
        self.next_due = 0.0
        self.is_streaming = False  # holds one of the server's stream slots
        self.num_tokens = int(body.get("max_tokens") or 16)
        self.num_chunks = -(-self.num_tokens // script.tokens_per_chunk)
        self.continuous_usage = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))
        self.prompt_tokens = len(prompt_words(body))
        self.reasoning_tokens = min(script.reasoning_tokens, self.num_tokens) if is_chat else 0
        self.cached_tokens = 0
        self.last_sent = 0.0
        self.first_text: str | None = None  # a quiz's answer, sent as the first chunk's content
        self.logprobs = bool(body.get("logprobs"))  # a quiz's first token with its logprob, when asked
        self.shaped: ShapedAnswer | None = None  # a shaped answer's pieces, a token each (`take_shape`)

    def take_shape(self, shaped: ShapedAnswer) -> None:
        """Stream `shaped` instead of words: as many tokens as it has pieces, cut at max_tokens as a server would."""
        self.shaped = shaped
        self.num_tokens = min(self.num_tokens, len(shaped.pieces))
        self.num_chunks = -(-self.num_tokens // self.script.tokens_per_chunk)
        self.reasoning_tokens = 0

    def note_sent(self, index: int, now: float, sent: SentTiming) -> None:
        if index == 0:
            sent.ttft_ms.append((now - self.arrived) * 1000)  # a wait for a stream slot included
        else:
            sent.itl_ms.append((now - self.last_sent) * 1000)
        self.last_sent = now

    def first_due_s(self) -> float:
        return (self.script.ttft_ms + self._stall_ms(0)) / 1000

    def gap_s(self, index: int, streams_in_flight: int) -> float:
        """The gap before chunk `index`, with `streams_in_flight` streams (this one included) now."""
        gap_ms = self.script.itl_ms
        if self.script.itl_per_stream_ms:
            gap_ms += self.script.itl_per_stream_ms * max(0, streams_in_flight - 1)
        if self.fault == "stall":
            gap_ms += self._stall_ms(index)
        return gap_ms / 1000

    def _stall_ms(self, index: int) -> float:
        return self.script.stall_ms if self.fault == "stall" and index == self.script.fault_after_chunks else 0.0

    def cuts_at(self, index: int) -> bool:
        return self.fault == "cut" and index == self.script.fault_after_chunks

    def errors_at(self, index: int) -> bool:
        return self.fault in ("error_event", "rate_limit_event") and index == self.script.fault_after_chunks

    def tokens_sent_after(self, index: int) -> int:
        return min(self.num_tokens, (index + 1) * self.script.tokens_per_chunk)

    def tokens_in(self, index: int) -> int:
        """Tokens chunk `index` carries (the last may carry fewer)."""
        return self.tokens_sent_after(index) - index * self.script.tokens_per_chunk

    def event(self, index: int) -> bytes:
        sent = self.tokens_sent_after(index)
        count = self.tokens_in(index)
        is_reasoning = sent <= self.reasoning_tokens  # a chunk is reasoning when all its tokens are
        usage_prompt = self.prompt_tokens if self.continuous_usage else None
        if self.shaped is not None:
            usage = _usage(usage_prompt, sent) if usage_prompt is not None else None
            return _shaped_event(self.shaped, index * self.script.tokens_per_chunk, sent, self.is_chat, usage)
        if index == 0 and self.first_text is not None:
            usage = _usage(usage_prompt, sent) if usage_prompt is not None else None
            return _event(self.first_text + " x" * (count - 1), self.is_chat, usage=usage,
                          logprobs=_logprobs(self.first_text.split()[0], self.is_chat) if self.logprobs else None)
        return _token_event(count, self.is_chat, usage_prompt, sent, is_reasoning)

    def tail(self) -> bytes:
        usage = _usage(self.prompt_tokens, self.num_tokens, self.reasoning_tokens, self.cached_tokens)
        last = _event("", self.is_chat, finish_reason=self.finish_reason())
        tail: dict[str, Any] = {"id": "scripted", "choices": [], "usage": usage}
        if self.script.spec_tokens:  # per-request figures: a chunk is a draft, its tokens past one kept
            spec = self.script.spec_tokens
            accepted = sum(min(self.tokens_in(i) - 1, spec) for i in range(self.num_chunks))
            if self.script.spec_report == "vllm":  # --per-request-spec-decode-metrics summary
                tail["metrics"] = {"speculative_decoding": {
                    "num_spec_steps": self.num_chunks, "num_draft_tokens": self.num_chunks * spec,
                    "num_accepted_draft_tokens": accepted, "num_spec_tokens": spec,
                    "mean_acceptance_length": 1 + accepted / self.num_chunks}}
            else:
                tail["timings"] = {"draft_n": self.num_chunks * spec, "draft_n_accepted": accepted}
        usage_only = b"data: " + orjson.dumps(tail) + b"\n\n"
        return last + usage_only + b"data: [DONE]\n\n"


    def finish_reason(self) -> str:
        shaped = self.shaped
        if shaped is None or self.num_tokens < len(shaped.pieces):
            return "length"
        return "tool_calls" if shaped.tool_name is not None and self.is_chat else "stop"


def _shaped_event(shaped: ShapedAnswer, start: int, end: int, is_chat: bool, usage: dict | None) -> bytes:
    """Pieces [start, end) of a shaped answer: content, or a tool call's arguments (its name in the first)."""
    text = "".join(shaped.pieces[start:end])
    if shaped.tool_name is None or not is_chat:
        return _event(text, is_chat, usage=usage)
    call: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
    if start == 0:
        call.update(id="call_0", type="function", function={"name": shaped.tool_name, "arguments": text})
    payload: dict[str, Any] = {"id": "scripted", "object": "chat.completion.chunk", "model": "scripted",
                               "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [call]}}]}
    if usage is not None:
        payload["usage"] = usage
    return b"data: " + orjson.dumps(payload) + b"\n\n"


@functools.lru_cache(maxsize=64)
def instant_answer(num_tokens: int, prompt_tokens: int, is_chat: bool, script: Script) -> bytes:
    """The whole answer in one write (cached), so the server costs next to nothing per request."""
    plan = StreamPlan({"max_tokens": num_tokens}, script, is_chat, "none")
    plan.prompt_tokens = prompt_tokens
    plan.reasoning_tokens = min(script.reasoning_tokens, num_tokens) if is_chat else 0
    payload = b"".join(plan.event(i) for i in range(plan.num_chunks)) + plan.tail()
    return b"%x\r\n%b\r\n0\r\n\r\n" % (len(payload), payload)


@functools.lru_cache(maxsize=1 << 16)
def _token_event(count: int, is_chat: bool, prompt_tokens: int | None, sent: int, is_reasoning: bool = False) -> bytes:
    """One chunk of `count` tokens (cached: the server's cost per chunk must stay tiny)."""
    usage = _usage(prompt_tokens, sent) if prompt_tokens is not None else None
    return _event(" x" * count, is_chat, usage=usage, is_reasoning=is_reasoning)


def _event(text: str, is_chat: bool, finish_reason: str | None = None, usage: dict | None = None,
           is_reasoning: bool = False, logprobs: dict[str, Any] | None = None) -> bytes:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish_reason}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    if is_chat:
        choice["delta"] = {"reasoning_content" if is_reasoning else "content": text} if text else {}
    else:
        choice["text"] = text
    payload: dict[str, Any] = {"id": "scripted", "object": "chat.completion.chunk" if is_chat else "text_completion",
                               "model": "scripted", "choices": [choice]}  # OpenAI's names: some clients parse by them
    if usage is not None:
        payload["usage"] = usage
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def whole_answer(body: dict[str, Any], is_chat: bool, script: Script) -> dict[str, Any]:
    """A non-streamed completion: a quiz's answer, else `max_tokens` words."""
    num_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
    text = (quiz_answer(body, script, 0) if script.right_share >= 0 else None) or " x" * num_tokens
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop", "logprobs": None}
    if is_chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    prompt_tokens = len(prompt_words(body))
    return {"id": "scripted", "object": "chat.completion" if is_chat else "text_completion", "model": script.model,
            "choices": [choice], "usage": _usage(prompt_tokens, len(text.split()))}


def _logprobs(token: str, is_chat: bool) -> dict[str, Any]:
    """OpenAI's logprobs of one token, its own the top alternative (chat: `content`; completions: `tokens`)."""
    if is_chat:
        return {"content": [{"token": token, "logprob": -0.05, "top_logprobs": [{"token": token, "logprob": -0.05}]}]}
    return {"tokens": [token], "token_logprobs": [-0.05], "top_logprobs": [{token: -0.05}]}


def _usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int = 0,
           cached_tokens: int = 0) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
    if reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    if cached_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return usage



def prompt_words(body: dict[str, Any]) -> list[str]:
    if "messages" in body:
        return [word for m in body["messages"] for word in str(m.get("content", "")).split()]
    return str(body.get("prompt", "")).split()
