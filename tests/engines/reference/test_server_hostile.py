"""One hostile client against a real server on 127.0.0.1 (dummy:tiny): each attack performed, each answered
within its limit, and the server still serves everyone else afterwards.

Stop lists past their limits, fields of the wrong type, headers sent a byte at a time, a body that never
ends, a body larger than the limit, more connections than the cap, a stream its client stops reading, wrong
keys, a server error's body, and adapters' paths in /v1/models (test_lora_serving.py).
"""

from __future__ import annotations

import json
import logging
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import httpx
import pytest

from engines.reference.loading.tokenizer import Tokenizer
from engines.reference.loading.weights import LoadedModel, resolve_model
from engines.reference.serving.connections import open_host_warning
from engines.reference.serving.options import API_KEY_ENV, ServerOptions, parse_args
from engines.reference.serving.server import Server, build_engine, running_server
from tests.engines.reference.test_server import assert_no_blocks_held, metric_samples

COMPLETIONS, CHAT = "/completions", "/chat/completions"
PROMPT = {"prompt": "hi", "max_tokens": 2}
CHAT_BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return resolve_model("dummy:tiny")


@contextmanager
def tiny_server(tiny: LoadedModel, **fields: object) -> Iterator[Server]:
    options = ServerOptions(**{"model": "dummy:tiny", "port": 0, "kv_cache_tokens": 8192, "max_model_len": 4096,
                               **fields})  # fmt: skip
    with running_server(options, build_engine(options, tiny)) as server:
        yield server


@pytest.fixture(scope="module")
def server(tiny: LoadedModel) -> Iterator[Server]:
    with tiny_server(tiny) as server:
        yield server


def address(server: Server) -> tuple[str, int]:
    url = urlsplit(server.base_url)
    return url.hostname or "127.0.0.1", url.port or 80


def raw_request(path: str, body: bytes, content_length: int | None = None, headers: str = "") -> bytes:
    length = len(body) if content_length is None else content_length
    return (f"POST /v1{path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {length}"
            f"\r\n{headers}\r\n").encode() + body  # fmt: skip


def read_until_closed(sock: socket.socket, timeout_s: float = 30.0) -> bytes:
    sock.settimeout(timeout_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def status_and_json(response: bytes) -> tuple[int, dict]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def wait_for(condition, timeout_s: float = 30.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the server never got there"
        time.sleep(0.02)


# ---- stop lists --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value", "flag"), [
    ("stop", ["~" * 40000] * 16, "--max-stop-chars"),  # the 640 KB body: one step thread stalled for all
    ("stop", ["~" * 1025], "--max-stop-chars"),
    ("stop", [f"s{i}" for i in range(17)], "--max-stop-strings"),
    ("stop_token_ids", list(range(257)), "--max-stop-token-ids"),
])  # fmt: skip
def test_a_hostile_stop_list_is_refused_naming_the_limit_and_its_flag(
    server: Server, field: str, value: list, flag: str
) -> None:
    for path, body in ((COMPLETIONS, PROMPT), (CHAT, CHAT_BODY)):
        response = httpx.post(server.base_url + path, json={**body, field: value}, timeout=30)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == field and flag in error["message"]
        assert len(error["message"]) < 400  # the hostile value is not echoed back whole


def test_the_most_hostile_stop_list_the_limits_take_is_served(server: Server) -> None:
    stops = [chr(0x4E00 + i) * 1024 for i in range(16)]  # 16 x 1024 characters, each almost matched by nothing
    body = {**PROMPT, "max_tokens": 64, "ignore_eos": True, "stop": stops, "min_tokens": 4, "stop_token_ids": [0, 1]}
    response = httpx.post(server.base_url + COMPLETIONS, json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] >= 4


def test_stop_strings_still_stop_and_are_cut_from_the_text(server: Server) -> None:
    free = httpx.post(server.base_url + COMPLETIONS, json={**PROMPT, "max_tokens": 40, "temperature": 0,
                                                            "ignore_eos": True}, timeout=30).json()  # fmt: skip
    text = free["choices"][0]["text"]
    stop = text[10:13]
    assert len(stop) == 3
    stopped = httpx.post(server.base_url + COMPLETIONS, json={**PROMPT, "max_tokens": 40, "temperature": 0,
                                                               "ignore_eos": True, "stop": ["\x00" * 1024, stop]},
                         timeout=30).json()  # fmt: skip
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["choices"][0]["text"] == text[: text.index(stop)]


# ---- fields of the wrong type -------------------------------------------------------------------------------

FIELDS = ("model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
          "seed", "stop", "stop_token_ids", "min_tokens", "ignore_eos", "stream", "stream_options", "n", "best_of",
          "logprobs", "top_logprobs", "echo", "presence_penalty", "frequency_penalty", "repetition_penalty",
          "add_generation_prompt", "user", "logit_bias", "response_format", "tools", "suffix")  # fmt: skip
HOSTILE_VALUES = ({}, {"a": {}}, [], [{}], [[]], "x", "", -1, 0, 10**400, 1e308, float("nan"), float("inf"), True)


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
def test_an_object_as_model_is_a_400_naming_model(server: Server, path: str) -> None:
    body = PROMPT if path == COMPLETIONS else CHAT_BODY
    for model in ({}, [], 5, ["dummy:tiny"]):
        response = httpx.post(server.base_url + path, json={**body, "model": model}, timeout=30)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "model" and "model must be a string" in error["message"]


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
def test_no_field_of_any_type_gets_a_server_error(server: Server, path: str) -> None:
    """Every field the API knows, each of many JSON values: answered, or refused naming the field, never a 500."""
    base = PROMPT if path == COMPLETIONS else CHAT_BODY
    messages = [[{"role": {}}], [{"role": "user", "content": {}}], [{"role": "user", "content": [{"type": "text"}]}],
                [{"role": "user", "content": [{"type": "text", "text": {}}]}], [{"role": "user", "content": "x",
                 "name": {}, "tool_calls": "x"}], [{"role": "tool", "content": "x"}]]  # fmt: skip
    cases = [(field, value) for field in FIELDS for value in HOSTILE_VALUES]
    cases += [("messages", value) for value in messages] + [("prompt", [[1, 2], [3]]), ("prompt", [10**30])]
    with httpx.Client(timeout=30) as client:
        for field, value in cases:
            content = json.dumps({**base, field: value}).encode()  # NaN and Infinity as Python's json writes them
            response = client.post(server.base_url + path, content=content)
            assert response.status_code < 500, (field, value, response.text)
            if response.status_code == 400:
                param = response.json()["error"]["param"] or ""
                assert param.split("[")[0].split(".")[0] in (field, "max_tokens", "prompt", "messages"), (field, param)
    assert_no_blocks_held(server)


# ---- slow and endless clients -------------------------------------------------------------------------------


def test_a_client_sending_its_headers_slowly_is_cut(tiny: LoadedModel) -> None:
    with tiny_server(tiny, idle_timeout_s=0.5) as server, socket.create_connection(address(server)) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: test\r\n")
        for byte in b"X-Slow: " + b"a" * 600:  # a byte every 50 ms: 30 s for the headers, were it let
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            if select.select([sock], [], [], 0.05)[0]:
                assert read_until_closed(sock) == b""  # closed, no answer: the headers never ended
                break
        else:
            pytest.fail("the server still waited for the headers after 30 s")
        assert httpx.post(server.base_url + COMPLETIONS, json=PROMPT, timeout=30).status_code == 200


def test_a_body_that_never_ends_is_answered_408_naming_the_flag(tiny: LoadedModel) -> None:
    with tiny_server(tiny, body_timeout_s=0.5) as server, socket.create_connection(address(server)) as sock:
        sock.sendall(raw_request(COMPLETIONS, b'{"prompt": "a very', content_length=1000))
        status, body = status_and_json(read_until_closed(sock))
        assert status == 408 and "--body-timeout-s" in body["error"]["message"]


def test_a_body_over_the_limit_is_refused_by_its_length_without_being_read(server: Server) -> None:
    with socket.create_connection(address(server)) as sock:
        sock.sendall(raw_request(COMPLETIONS, b'{"prompt": "' + b"x" * 1000, content_length=10**10))
        response = read_until_closed(sock)  # before: the server read on, waiting for 10 GB that never came
    status, body = status_and_json(response)
    assert status == 413 and "--max-model-len" in body["error"]["message"]
    assert b"Connection: close" in response


def test_expect_100_continue_refuses_a_body_too_large_before_it_is_sent(server: Server) -> None:
    with socket.create_connection(address(server)) as sock:
        sock.sendall(raw_request(COMPLETIONS, b"", content_length=10**10, headers="Expect: 100-continue\r\n"))
        response = read_until_closed(sock)
    assert response.startswith(b"HTTP/1.1 413") and b"100 Continue" not in response
    body = json.dumps(PROMPT).encode()
    with socket.create_connection(address(server)) as sock:  # a body within the limit is asked for, then served
        sock.sendall(raw_request(COMPLETIONS, b"", content_length=len(body),
                                 headers="Expect: 100-continue\r\nConnection: close\r\n"))  # fmt: skip
        sock.settimeout(30)
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body)
        assert status_and_json(read_until_closed(sock))[0] == 200


def test_connections_past_the_cap_are_answered_503_naming_the_flag(tiny: LoadedModel) -> None:
    with tiny_server(tiny, max_connections=3, idle_timeout_s=60) as server:
        assert server.site is not None
        idle = [socket.create_connection(address(server)) for _ in range(3)]  # open, silent: holding a place
        try:
            wait_for(lambda: server.site.num_open == 3)
            refused = httpx.post(server.base_url + COMPLETIONS, json=PROMPT, timeout=30)
            assert refused.status_code == 503, refused.text
            error = refused.json()["error"]
            assert error["code"] == "too_many_connections" and "--max-connections" in error["message"]
            idle.pop().close()
            wait_for(lambda: server.site.num_open == 2)
            assert httpx.post(server.base_url + COMPLETIONS, json=PROMPT, timeout=30).status_code == 200
        finally:
            for sock in idle:
                sock.close()
        wait_for(lambda: server.site.num_open == 0)


@contextmanager
def unread_stream(server: Server) -> Iterator[socket.socket]:
    """A long stream asked for and never read. The server's send buffer for it is shrunk to 4 KB (the kernel
    would grow it to megabytes first): what a client that stops reading fills sooner or later."""
    assert server.site is not None
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(address(server))
    try:
        wait_for(lambda: server.site.connections)
        server_socket = server.site.connections[0].transport.get_extra_info("socket")
        server_socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 4000, "ignore_eos": True, "stream": True}).encode()
        sock.sendall(raw_request(COMPLETIONS, body))
        yield sock
    finally:
        sock.close()


@pytest.mark.parametrize("limit", [{"max_pending_outputs": 8}, {"send_timeout_s": 0.5}])
def test_a_client_that_stops_reading_a_stream_is_cut_and_its_request_aborted(tiny: LoadedModel, limit: dict) -> None:
    with tiny_server(tiny, **{"max_pending_outputs": 10**6, "send_timeout_s": 600, **limit}) as server:
        with unread_stream(server) as sock:
            wait_for(lambda: server.engine.stats().num_requests_added == 1)
            wait_for(lambda: not server.engine.num_unfinished, timeout_s=120)
            received = read_until_closed(sock)
        assert b"data: " in received and b"[DONE]" not in received  # cut short, then closed
        assert metric_samples(server)['vllm:request_success_total{finished_reason=abort}'] == 1
        assert server.engine.stats().num_generation_tokens < 4000
        assert_no_blocks_held(server)
        assert httpx.post(server.base_url + COMPLETIONS, json=PROMPT, timeout=30).status_code == 200


# ---- keys, errors, exposure ---------------------------------------------------------------------------------


def test_the_key_is_read_from_the_environment_and_checked(tiny: LoadedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_REFERENCE_KEY", "s3cret-key")
    with tiny_server(tiny, api_key_env="TEST_REFERENCE_KEY") as server:
        url = server.base_url + COMPLETIONS
        for header in ({}, {"Authorization": "Bearer s3cret-kez"}, {"Authorization": "Bearer s3cret-key2"},
                       {"Authorization": "s3cret-key"}, {"Authorization": b"Bearer \xe9\xff"}):  # fmt: skip
            response = httpx.post(url, json=PROMPT, headers=header, timeout=30)
            assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
            assert "s3cret" not in response.text
        assert httpx.post(url, json=PROMPT, headers={"Authorization": "Bearer s3cret-key"}).status_code == 200


def test_the_key_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    assert parse_args([]).api_key_env is None
    monkeypatch.setenv(API_KEY_ENV, "k")
    options = parse_args([])
    assert options.api_key_env == API_KEY_ENV and options.api_key is None  # the key itself stays in the env
    monkeypatch.setenv("OTHER_KEY", "k2")
    assert parse_args(["--api-key-env", "OTHER_KEY"]).api_key_env == "OTHER_KEY"
    for argv in (["--api-key-env", "NOT_SET_ANYWHERE"], ["--api-key", "a", "--api-key-env", "OTHER_KEY"]):
        with pytest.raises(SystemExit) as exited:
            parse_args(argv)
        assert exited.value.code == 2


def test_a_named_key_that_is_not_set_stops_the_server_before_the_model_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(ValueError, match="NOT_SET_ANYWHERE"):
        Server(ServerOptions(model="/no/such/model.gguf", api_key_env="NOT_SET_ANYWHERE"))


def test_a_server_error_says_only_internal_error_and_an_id_the_log_explains(
    server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No bug is left to cause a 500 for real, so one is planted: the tokenizer raises with a secret in its text."""

    def broken(*args: object, **kwargs: object) -> list[int]:
        raise RuntimeError("secret-detail /home/someone/model")

    monkeypatch.setattr(Tokenizer, "encode", broken)
    with caplog.at_level(logging.ERROR):
        response = httpx.post(server.base_url + COMPLETIONS, json=PROMPT, timeout=30)
    assert response.status_code == 500
    message = response.json()["error"]["message"]
    assert message.startswith("internal error (id err-") and "secret" not in response.text
    error_id = message.removeprefix("internal error (id ").removesuffix(")")
    assert any(error_id in record.getMessage() and "secret-detail" in str(record.exc_info) for record in caplog.records)


def test_a_failed_step_tells_clients_the_engine_failed_and_nothing_more(
    tiny: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    with tiny_server(tiny) as server:

        def broken() -> list:
            raise RuntimeError("secret-detail in a step")

        monkeypatch.setattr(server.engine, "step", broken)
        response = httpx.post(server.base_url + COMPLETIONS, json=PROMPT, timeout=30)
        assert response.status_code == 503 and "secret" not in response.text
        assert "the engine failed" in response.json()["error"]["message"]


def test_only_a_host_others_can_reach_without_a_key_is_warned_of(
    tiny: LoadedModel, capfd: pytest.CaptureFixture[str]
) -> None:
    warning = open_host_warning([("0.0.0.0", 8000)])
    assert warning is not None and "0.0.0.0" in warning and API_KEY_ENV in warning
    assert open_host_warning([("192.168.1.5", 8000)]) is not None
    assert open_host_warning([("127.0.0.1", 8000), ("::1", 8000, 0, 0)]) is None
    with tiny_server(tiny):
        pass
    assert "warning" not in capfd.readouterr().err  # 127.0.0.1: nothing to say
