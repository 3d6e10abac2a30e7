"""`--engine endpoint` given no `--model`: a server that lists one model is measured with it, recorded in run.json
exactly as if `--model` had named it; a server that lists several, none, or answers with something that is not
a model list is refused in one line naming --model and --base-url, before any request is sent.

The server is a real aiohttp server on 127.0.0.1 whose /v1/models answer each test sets, and which streams a
few tokens for each chat completion, noting the model each one asked for."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from engines.endpoint import EndpointError, served_model
from engines.types import Endpoint
from tests.bench.test_cli import bench, only_run_dir


@dataclass
class ModelsServer:
    base_url: str
    models_body: bytes = b'{"object": "list", "data": []}'
    asked: list[str | None] = field(default_factory=list)  # the model each chat completion named
    key: str | None = None  # the API key /v1/models wants, if any

    def lists(self, *names: str) -> None:
        self.models_body = json.dumps({"object": "list", "data": [{"id": n, "object": "model"} for n in names]}
                                      ).encode()


def _chunk(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _app(server: ModelsServer) -> web.Application:
    async def models(request: web.Request) -> web.Response:
        if server.key is not None and request.headers.get("Authorization") != f"Bearer {server.key}":
            return web.json_response({"error": {"message": "invalid API key"}}, status=401)
        return web.Response(body=server.models_body, content_type="application/json")

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        server.asked.append(body.get("model"))
        num_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 4)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(num_tokens):
            await response.write(_chunk({"id": "c", "object": "chat.completion.chunk", "model": body.get("model"),
                                         "choices": [{"index": 0, "delta": {"content": " x"}, "finish_reason": None}]}))
        await response.write(_chunk({"id": "c", "object": "chat.completion.chunk", "model": body.get("model"),
                                     "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                                     "usage": {"prompt_tokens": 8, "completion_tokens": num_tokens,
                                               "total_tokens": 8 + num_tokens}}))
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.add_routes([web.get("/v1/models", models), web.post("/v1/chat/completions", chat)])
    return app


@pytest.fixture
def models_server() -> Iterator[ModelsServer]:
    """The server in a thread of its own, on a port of 127.0.0.1 the system chose."""
    loop = asyncio.new_event_loop()
    server = ModelsServer("")
    runner = web.AppRunner(_app(server))
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    server.base_url = f"http://127.0.0.1:{port}/v1"
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def _sweep(server: ModelsServer, out: Path, *extra: str) -> list[str]:
    return ["sweep", "--engine", "endpoint", "--base-url", server.base_url, "--concurrency", "1", "--requests", "3",
            "--warmup", "0", "--output-tokens", "4", "--no-report", "--out", str(out), *extra]


def _as_recorded(run_dir: Path) -> dict:
    """What run.json says of the engine, the endpoint and the spec a resume would launch again."""
    run = json.loads((run_dir / "run.json").read_text())
    return {"engine": run["engine"]["model"], "endpoint": run["endpoint"], "engine_spec": run["engine_spec"],
            "levels": run["levels"], "status": run["status"]}


def test_the_one_model_a_server_lists_is_measured_and_recorded_as_if_named(models_server, tmp_path) -> None:
    models_server.lists("solo-7b")
    chosen = bench(*_sweep(models_server, tmp_path / "chosen"))
    assert chosen.returncode == 0, chosen.stderr
    assert models_server.asked == ["solo-7b"] * 3  # every request named the model the server serves
    assert f"--model not given: {models_server.base_url} serves one model, 'solo-7b'" in chosen.stdout
    named = bench(*_sweep(models_server, tmp_path / "named", "--model", "solo-7b"))
    assert named.returncode == 0, named.stderr
    recorded = _as_recorded(only_run_dir(tmp_path / "chosen"))
    assert recorded["engine"] == recorded["endpoint"]["model"] == recorded["engine_spec"]["model"] == "solo-7b"
    assert recorded == _as_recorded(only_run_dir(tmp_path / "named"))  # run.json as if --model had been given
    assert recorded["status"] == "complete" and recorded["levels"] == ["c1"]


def test_a_server_listing_two_models_is_refused_with_both_named(models_server, tmp_path) -> None:
    models_server.lists("base-8b", "[bold red]tuned[/]")  # a name that is rich markup is printed as it is
    result = bench(*_sweep(models_server, tmp_path))
    assert result.returncode == 2
    line = " ".join(result.stderr.split())
    assert (f"--engine endpoint without --model: --base-url {models_server.base_url} serves 2 models; choose one "
            "with --model: 'base-8b', '[bold red]tuned[/]'") in line
    assert "Traceback" not in result.stderr and models_server.asked == []
    assert not (tmp_path / "runs").exists() and not any(p for p in tmp_path.iterdir() if p.is_dir())


@pytest.mark.parametrize(("body", "what"), [
    (b"<html>not json</html>", "did not return an OpenAI model list"),
    (b'{"data": "solo-7b"}', "did not return an OpenAI model list"),
    (b'{"data": [{"id": {"nested": 1}}]}', "did not return an OpenAI model list"),
    (b'{"data": [{"name": "no id"}]}', "did not return an OpenAI model list"),
    (b"[" * 100_000 + b"]" * 100_000, "did not return an OpenAI model list"),  # deeper than the JSON parser goes
    (b'{"object": "list", "data": []}', "lists no model at /models; give --model"),
])
def test_a_malformed_or_empty_model_list_is_one_line_naming_model_and_base_url(models_server, tmp_path, body: bytes,
                                                                             what: str) -> None:
    models_server.models_body = body
    result = bench(*_sweep(models_server, tmp_path))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # no traceback
    assert what in result.stderr and "--model" in result.stderr and models_server.base_url in result.stderr
    assert models_server.asked == []


def test_an_unreachable_server_names_model_and_base_url(tmp_path) -> None:
    result = bench("sweep", "--engine", "endpoint", "--base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert ("--engine endpoint without --model: could not ask --base-url http://127.0.0.1:9/v1 which model it "
            "serves (cannot reach") in result.stderr and "give --model" in result.stderr


def test_many_models_are_listed_the_first_twenty_and_a_count(models_server) -> None:
    models_server.lists(*(f"m{n}" for n in range(25)))
    with pytest.raises(EndpointError) as refused:
        served_model(Endpoint(models_server.base_url, ""))
    message = str(refused.value)
    assert "serves 25 models" in message and "'m19' and 5 more" in message and "'m20'" not in message


def test_the_key_is_sent_when_the_endpoint_names_one(models_server, monkeypatch) -> None:
    """A server that wants a key lists its model only to a request that carries it."""
    monkeypatch.setenv("MODELS_KEY_FOR_TEST", "k-7d2e")
    models_server.lists("keyed")
    models_server.key = "k-7d2e"
    assert served_model(Endpoint(models_server.base_url, "", api_key_env="MODELS_KEY_FOR_TEST")) == "keyed"
    with pytest.raises(EndpointError, match=r"refused the API key \(HTTP 401\); check --api-key-env\); give --model"):
        served_model(Endpoint(models_server.base_url, ""))  # no key sent: refused, and said so
    monkeypatch.delenv("MODELS_KEY_FOR_TEST")
    with pytest.raises(EndpointError, match="MODELS_KEY_FOR_TEST, but that environment variable is not set"):
        served_model(Endpoint(models_server.base_url, "", api_key_env="MODELS_KEY_FOR_TEST"))
