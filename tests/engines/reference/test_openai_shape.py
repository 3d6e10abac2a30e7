"""The reference engine as other tools see it: no chunk before the first generated token (a client that times
the first chunk of any kind, as vLLM's and SGLang's benchmarks do, reads the true TTFT), requests outside
the API refused (an unknown role, a body far past the context), and every object carrying the fields
OpenAI's published schema requires, with their types (written from OpenAI's API reference)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from engines.reference.loading.weights import LoadedModel, resolve_model
from engines.reference.serving.server import Server
from tests.engines.reference.test_server import tiny_server

CHAT, COMPLETIONS = "/chat/completions", "/completions"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    tiny: LoadedModel = resolve_model("dummy:tiny")
    with tiny_server(tiny) as running:
        yield running


def sse_events(response: httpx.Response) -> Iterator[tuple[float, dict | str]]:
    """(arrival time, payload) of each event of a streamed answer."""
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            yield time.perf_counter(), data if data == "[DONE]" else json.loads(data)


def test_the_first_chunk_is_the_first_token_with_the_role(server: Server) -> None:
    body = {"model": "dummy:tiny", "messages": MESSAGES, "max_tokens": 6, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", server.base_url + CHAT, json=body, timeout=30) as response:
        events = list(sse_events(response))
    payloads = [p for _, p in events]
    first = payloads[0]
    assert isinstance(first, dict) and first["choices"][0]["delta"]["role"] == "assistant"
    assert "content" in first["choices"][0]["delta"]  # the role rides with the first generated token
    # One chunk a token (dummy:tiny's byte-level text may be empty for a token that ends no character).
    tokens = [p for p in payloads if isinstance(p, dict) and p["choices"]]
    assert tokens[0] is first and len(tokens) == 6
    assert payloads[-2]["choices"] == [] and payloads[-2]["usage"]["completion_tokens"] == 6
    assert payloads[-1] == "[DONE]"


def test_ttft_timed_by_the_first_chunk_of_any_kind_is_the_first_tokens_time(server: Server) -> None:
    """vLLM's `bench serve` and SGLang's client time the first chunk of any kind; ours, the first carrying a
    generated token. With usage in every chunk, the first chunk says how many tokens had been generated."""
    body = {"model": "dummy:tiny", "messages": [{"role": "user", "content": "word " * 80}], "max_tokens": 4,
            "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    for _ in range(3):
        with httpx.stream("POST", server.base_url + CHAT, json=body, timeout=30) as response:
            events = list(sse_events(response))
        first_any = events[0]
        first_token = next((t, p) for t, p in events if isinstance(p, dict) and p["choices"])
        assert first_any == first_token and first_any[1]["usage"]["completion_tokens"] == 1


@pytest.mark.parametrize("role", ["wizard", "", "USER"])
def test_an_unknown_role_is_a_400_naming_the_roles_accepted(server: Server, role: str) -> None:
    body = {"model": "dummy:tiny", "messages": [{"role": role, "content": "hi"}], "max_tokens": 2}
    response = httpx.post(server.base_url + CHAT, json=body, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "messages[0].role"
    assert "system, user, assistant, developer, tool" in error["message"]


def test_a_body_far_past_the_context_is_a_413_before_any_tokenizing_and_the_server_goes_on(server: Server) -> None:
    huge = {"model": "dummy:tiny", "prompt": "x" * 10_000_000, "max_tokens": 2}
    started = time.perf_counter()
    response = httpx.post(server.base_url + COMPLETIONS, json=huge, timeout=60)
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "request_too_large" and "bytes" in error["message"] and "512 tokens" in error["message"]
    assert time.perf_counter() - started < 5  # refused on its size, not tokenized
    again = httpx.post(server.base_url + COMPLETIONS, json={"prompt": "hello", "max_tokens": 2}, timeout=30)
    assert again.status_code == 200


# ---- the published schema: every required field, with its type ----------------------------------------

def check(obj: dict, fields: dict[str, type | tuple[type, ...]], what: str) -> None:
    missing = [name for name in fields if name not in obj]
    assert not missing, f"{what} lacks {missing}: {obj}"
    wrong = [name for name, kind in fields.items() if not isinstance(obj[name], kind)]
    assert not wrong, f"{what}: wrong type of {wrong}: {obj}"


NULLABLE_STR = (str, type(None))
USAGE = {"prompt_tokens": int, "completion_tokens": int, "total_tokens": int}
ENVELOPE = {"id": str, "object": str, "created": int, "model": str, "choices": list}


def test_a_chat_completion_has_every_required_field_refusal_included(server: Server) -> None:
    answer = httpx.post(server.base_url + CHAT, json={"messages": MESSAGES, "max_tokens": 3}, timeout=30).json()
    check(answer, ENVELOPE, "chat.completion")
    assert answer["object"] == "chat.completion"
    (choice,) = answer["choices"]
    check(choice, {"index": int, "message": dict, "finish_reason": str, "logprobs": type(None)}, "choice")
    check(choice["message"], {"role": str, "content": NULLABLE_STR, "refusal": NULLABLE_STR}, "message")
    assert choice["message"]["refusal"] is None and choice["message"]["role"] == "assistant"
    check(answer["usage"], USAGE, "usage")


def test_stream_chunks_and_their_usage_have_every_required_field(server: Server) -> None:
    body = {"messages": MESSAGES, "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", server.base_url + CHAT, json=body, timeout=30) as response:
        chunks = [p for _, p in sse_events(response) if isinstance(p, dict)]
    for chunk in chunks:
        check(chunk, ENVELOPE, "chat.completion.chunk")
        assert chunk["object"] == "chat.completion.chunk"
        for choice in chunk["choices"]:
            check(choice, {"index": int, "delta": dict, "finish_reason": NULLABLE_STR}, "chunk choice")
    check(chunks[-1]["usage"], USAGE, "the usage chunk")


def test_a_text_completion_has_every_required_field(server: Server) -> None:
    answer = httpx.post(server.base_url + COMPLETIONS, json={"prompt": "hello", "max_tokens": 3}, timeout=30).json()
    check(answer, ENVELOPE, "text_completion")
    assert answer["object"] == "text_completion"
    check(answer["choices"][0], {"index": int, "text": str, "finish_reason": str, "logprobs": type(None)}, "choice")
    check(answer["usage"], USAGE, "usage")


def test_the_model_list_and_an_error_have_every_required_field(server: Server) -> None:
    models = httpx.get(server.base_url + "/models", timeout=10).json()
    check(models, {"object": str, "data": list}, "model list")
    check(models["data"][0], {"id": str, "object": str, "created": int, "owned_by": str}, "model")
    error = httpx.post(server.base_url + COMPLETIONS, json={"prompt": ""}, timeout=10).json()["error"]
    check(error, {"message": str, "type": str, "param": NULLABLE_STR, "code": NULLABLE_STR}, "error")
