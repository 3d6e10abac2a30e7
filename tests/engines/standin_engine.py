"""A stand-in for engines that cannot be installed here (`ollama serve`, SGLang's `launch_server`): a real
aiohttp server speaking the parts of their protocols the launchers rely on, plus OpenAI's streaming chat.

    python standin_engine.py ollama RECORD_FILE serve        # listens where $OLLAMA_HOST says
    python standin_engine.py sglang RECORD_FILE -m sglang.launch_server --model-path M --served-model-name N \
        --host H --port P [more flags]

It first writes what it was started with (its arguments after RECORD_FILE, its OLLAMA_* variables, its pid)
to RECORD_FILE as JSON, and it stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

VERSION = "0.0.1-standin"
OLLAMA_MODELS = ["tiny:latest"]


def chat_routes(served: list[str]) -> list[web.RouteDef]:
    """`/v1/models` and a streaming `/v1/chat/completions`: one chunk per token, then the finish reason, the
    usage when asked for it, and `[DONE]`."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": name, "object": "model"} for name in served]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        num_tokens = int(body.get("max_tokens") or 8)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        base = {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": body["model"]}
        for i in range(num_tokens):
            delta = {"role": "assistant", "content": "tok "} if i == 0 else {"content": "tok "}
            await _send(response, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        await _send(response, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            num_prompt = sum(len(m["content"].split()) for m in body["messages"])
            usage = {"prompt_tokens": num_prompt, "completion_tokens": num_tokens,
                     "total_tokens": num_prompt + num_tokens}
            await _send(response, {**base, "choices": [], "usage": usage})
        await response.write(b"data: [DONE]\n\n")
        return response

    return [web.get("/v1/models", models), web.post("/v1/chat/completions", chat)]


async def _send(response: web.StreamResponse, event: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")


def ollama_app() -> web.Application:
    async def version(request: web.Request) -> web.Response:
        return web.json_response({"version": VERSION})

    async def tags(request: web.Request) -> web.Response:
        return web.json_response({"models": [{"name": name, "model": name, "size": 1, "digest": "0" * 64}
                                             for name in OLLAMA_MODELS]})

    app = web.Application()
    app.add_routes([web.get("/api/version", version), web.get("/api/tags", tags), *chat_routes(OLLAMA_MODELS)])
    return app


def sglang_app(served: str) -> web.Application:
    """As SGLang before `/server_info`: its version only at `/get_server_info`."""

    async def health(request: web.Request) -> web.Response:
        return web.Response()

    async def server_info(request: web.Request) -> web.Response:
        return web.json_response({"version": VERSION, "served_model_name": served})

    app = web.Application()
    app.add_routes([web.get("/health", health), web.get("/get_server_info", server_info), *chat_routes([served])])
    return app


def main(argv: list[str]) -> None:
    kind, record_file, *args = argv
    ollama_env = {key: value for key, value in os.environ.items() if key.startswith("OLLAMA_")}
    Path(record_file).write_text(json.dumps({"argv": args, "env": ollama_env, "pid": os.getpid()}))
    if kind == "ollama":
        assert args == ["serve"], args
        host, _, port = os.environ["OLLAMA_HOST"].rpartition(":")
        app = ollama_app()
    else:
        parser = argparse.ArgumentParser()
        for flag in ("-m", "--model-path", "--served-model-name", "--host", "--port"):
            parser.add_argument(flag, required=True)
        known, _ = parser.parse_known_args(args)
        host, port, app = known.host, known.port, sglang_app(known.served_model_name)
    web.run_app(app, host=host, port=int(port), print=None)  # SIGTERM ends it


if __name__ == "__main__":
    main(sys.argv[1:])
