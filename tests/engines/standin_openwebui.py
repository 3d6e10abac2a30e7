"""A stand-in for Open WebUI's server, speaking what the launcher and the load generator use of it:

    open-webui serve --host H --port P      (configured from the environment, as Open WebUI is)

GET /health; POST /api/v1/auths/signin (401 until signed up), /api/v1/auths/signup (the first user is
admin), /api/v1/auths/api_key (Bearer session token); GET /api/models and /api/v1/models (asked of the
engine at OPENAI_API_BASE_URL, Bearer API key); POST /api/v1/chat/completions, streamed through from the
engine chunk by chunk; GET /api/version. It serves no browser page; it makes `webui.db` in DATA_DIR. At
start it writes the environment it was given (names and values, less the secret key) to
`$STANDIN_OPENWEBUI_ENV`, so tests can see how it was configured. The real Open WebUI is several GB and
takes 20 s to start: it runs in `pytest -m openwebui`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys

import aiohttp
from aiohttp import web

VERSION = "0.0.0-standin"


def make_app() -> web.Application:
    engine = os.environ["OPENAI_API_BASE_URL"].rstrip("/")
    engine_key = os.environ.get("OPENAI_API_KEY", "")
    users: dict[str, str] = {}
    sessions: set[str] = set()
    keys: set[str] = set()

    def bearer(request: web.Request) -> str:
        return request.headers.get("Authorization", "").removeprefix("Bearer ")

    async def signin(request: web.Request) -> web.Response:
        body = await request.json()
        if users.get(body["email"]) != body["password"]:
            return web.json_response({"detail": "The email or password provided is incorrect."}, status=400)
        token = secrets.token_hex(8)
        sessions.add(token)
        return web.json_response({"token": token, "role": "admin", "email": body["email"]})

    async def signup(request: web.Request) -> web.Response:
        body = await request.json()
        users[body["email"]] = body["password"]
        return await signin(request)

    async def api_key(request: web.Request) -> web.Response:
        if bearer(request) not in sessions:
            return web.json_response({"detail": "Not authenticated"}, status=401)
        key = "sk-" + secrets.token_hex(16)
        keys.add(key)
        return web.json_response({"api_key": key})

    async def models(request: web.Request) -> web.Response:
        if bearer(request) not in keys | sessions:
            return web.json_response({"detail": "Not authenticated"}, status=401)
        async with aiohttp.ClientSession() as client, \
                client.get(engine + "/models", headers={"Authorization": f"Bearer {engine_key}"}) as response:
            return web.json_response(await response.json())

    async def chat(request: web.Request) -> web.StreamResponse:
        if bearer(request) not in keys:
            return web.json_response({"detail": "Not authenticated"}, status=401)
        body = await request.read()
        async with aiohttp.ClientSession() as client, \
                client.post(engine + "/chat/completions", data=body, headers={
                    "Content-Type": "application/json", "Authorization": f"Bearer {engine_key}"}) as upstream:
            out = web.StreamResponse(status=upstream.status, headers={"Content-Type": upstream.content_type})
            await out.prepare(request)
            async for chunk in upstream.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    app = web.Application()
    app.add_routes([
        web.get("/health", lambda r: web.json_response({"status": True})),
        web.get("/api/version", lambda r: web.json_response({"version": VERSION})),
        web.post("/api/v1/auths/signin", signin), web.post("/api/v1/auths/signup", signup),
        web.post("/api/v1/auths/api_key", api_key),
        web.get("/api/models", models), web.get("/api/v1/models", models),
        web.post("/api/v1/chat/completions", chat),
    ])
    return app


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="open-webui")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    if path := os.environ.get("STANDIN_OPENWEBUI_ENV"):
        given = {k: v for k, v in os.environ.items() if k != "WEBUI_SECRET_KEY"}
        with open(path, "w") as f:
            json.dump({"argv": argv, "env": given}, f)
    # Its database, made as SQLite makes one (mode 0666 less the umask), where Open WebUI keeps it.
    with open(os.path.join(os.environ["DATA_DIR"], "webui.db"), "a"):
        pass
    web.run_app(make_app(), host=args.host, port=args.port, print=None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
