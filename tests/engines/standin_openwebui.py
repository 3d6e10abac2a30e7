"""A stand-in for Open WebUI's server, speaking what the launcher and the load generator use of it:

    open-webui serve --host H --port P      (configured from the environment, as Open WebUI is)

GET /health; POST /api/v1/auths/signin (400 for a wrong password), /api/v1/auths/signup (403 while
ENABLE_SIGNUP is off; the first account is admin, later ones get DEFAULT_USER_ROLE, and the first one
closes sign-up, as Open WebUI does), /api/v1/auths/api_key (Bearer session token); GET and POST
/api/v1/auths/admin/config (an admin's session; POST takes the whole config, as its pydantic form does);
GET /api/models and /api/v1/models (asked of the engine at OPENAI_API_BASE_URL with OPENAI_API_KEY, Bearer
API key); POST /api/v1/chat/completions, streamed through from the engine chunk by chunk; GET /api/version.

Accounts live where Open WebUI keeps them: the `user` (id, name, email, role, created_at) and `auth` (id,
email, password) tables of `webui.db` in DATA_DIR. At start, with no account yet, WEBUI_ADMIN_EMAIL and
WEBUI_ADMIN_PASSWORD make the admin and close sign-up before anything is served (Open WebUI 0.7 on; set
STANDIN_OPENWEBUI_OLD=1 to play an older one, which ignores them and leaves sign-up open after its first
account, as ENABLE_SIGNUP says). It serves no browser page. At
start it writes the environment it was given (names and values, less the secret key) to
`$STANDIN_OPENWEBUI_ENV`, so tests can see how it was configured. The real Open WebUI is several GB and
takes 20 s to start: it runs in `pytest -m openwebui`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sqlite3
import sys
import time
import uuid

import aiohttp
from aiohttp import web

VERSION = "0.0.0-standin"
ADMIN_CONFIG = {"SHOW_ADMIN_DETAILS": True, "WEBUI_URL": "", "ENABLE_SIGNUP": True, "ENABLE_API_KEYS": True,
                "DEFAULT_USER_ROLE": "pending", "JWT_EXPIRES_IN": "4w", "ENABLE_COMMUNITY_SHARING": False}


def database(data_dir: str) -> sqlite3.Connection:
    """Open WebUI's database, its two account tables made if new (SQLite makes the file 0666 less the umask)."""
    db = sqlite3.connect(os.path.join(data_dir, "webui.db"), isolation_level=None)
    db.execute('CREATE TABLE IF NOT EXISTS "user" (id TEXT PRIMARY KEY, name TEXT, email TEXT, role TEXT, '
               "created_at INTEGER)")
    db.execute("CREATE TABLE IF NOT EXISTS auth (id TEXT PRIMARY KEY, email TEXT, password TEXT)")
    return db


def add_account(db: sqlite3.Connection, email: str, password: str, name: str, role: str) -> None:
    user_id = str(uuid.uuid4())
    db.execute('INSERT INTO "user" VALUES (?, ?, ?, ?, ?)', (user_id, name, email.lower(), role, time.time_ns()))
    db.execute("INSERT INTO auth VALUES (?, ?, ?)", (user_id, email.lower(), password))


def make_app(db: sqlite3.Connection, config: dict[str, object], old: bool) -> web.Application:
    engine = os.environ["OPENAI_API_BASE_URL"].rstrip("/")
    engine_key = os.environ.get("OPENAI_API_KEY", "")
    sessions: dict[str, str] = {}  # token -> email
    keys: set[str] = set()

    def bearer(request: web.Request) -> str:
        return request.headers.get("Authorization", "").removeprefix("Bearer ")

    def role_of(email: str) -> str | None:
        row = db.execute('SELECT role FROM "user" WHERE email = ?', (email,)).fetchone()
        return row[0] if row else None

    async def signin(request: web.Request) -> web.Response:
        body = await request.json()
        email = str(body["email"]).lower()
        row = db.execute("SELECT password FROM auth WHERE email = ?", (email,)).fetchone()
        if row is None or row[0] != body["password"]:
            return web.json_response({"detail": "The email or password provided is incorrect."}, status=400)
        token = secrets.token_hex(8)
        sessions[token] = email
        return web.json_response({"token": token, "role": role_of(email), "email": email})

    async def signup(request: web.Request) -> web.Response:
        if not config["ENABLE_SIGNUP"]:
            return web.json_response({"detail": "You do not have permission to access this resource."}, status=403)
        body = await request.json()
        if role_of(str(body["email"]).lower()) is not None:
            return web.json_response({"detail": "Uh-oh! This email is already registered."}, status=400)
        first = db.execute('SELECT COUNT(*) FROM "user"').fetchone()[0] == 0
        add_account(db, body["email"], body["password"], body["name"], "admin" if first else
                    str(config["DEFAULT_USER_ROLE"]))
        if first and not old:
            config["ENABLE_SIGNUP"] = False  # Open WebUI closes sign-up after its first account
        return await signin(request)

    async def admin_config(request: web.Request) -> web.Response:
        if role_of(sessions.get(bearer(request), "")) != "admin":
            return web.json_response({"detail": "You do not have permission to access this resource."}, status=401)
        if request.method == "POST":
            body = await request.json()
            missing = sorted(set(ADMIN_CONFIG) - set(body))
            if missing:
                return web.json_response({"detail": [{"loc": ["body", name], "msg": "Field required"}
                                                     for name in missing]}, status=422)
            config.update({name: body[name] for name in ADMIN_CONFIG})
        return web.json_response({name: config[name] for name in ADMIN_CONFIG})

    async def api_key(request: web.Request) -> web.Response:
        if bearer(request) not in sessions:
            return web.json_response({"detail": "Not authenticated"}, status=401)
        key = "sk-" + secrets.token_hex(16)
        keys.add(key)
        return web.json_response({"api_key": key})

    async def models(request: web.Request) -> web.Response:
        if bearer(request) not in keys | set(sessions):
            return web.json_response({"detail": "Not authenticated"}, status=401)
        async with aiohttp.ClientSession() as client, \
                client.get(engine + "/models", headers={"Authorization": f"Bearer {engine_key}"}) as response:
            listed = await response.json() if response.status == 200 else {}
            return web.json_response({"data": listed.get("data", [])})  # an engine that refused lists nothing

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
        web.get("/api/v1/auths/admin/config", admin_config), web.post("/api/v1/auths/admin/config", admin_config),
        web.post("/api/v1/auths/api_key", api_key),
        web.get("/api/models", models), web.get("/api/v1/models", models),
        web.post("/api/v1/chat/completions", chat),
    ])
    return app


def starting_config(db: sqlite3.Connection, old: bool) -> dict[str, object]:
    """Its configuration from the environment; the headless admin made where there is no account yet."""
    config = {**ADMIN_CONFIG, "ENABLE_SIGNUP": os.environ.get("ENABLE_SIGNUP", "true").lower() == "true",
              "DEFAULT_USER_ROLE": os.environ.get("DEFAULT_USER_ROLE", "pending")}
    email, password = os.environ.get("WEBUI_ADMIN_EMAIL", ""), os.environ.get("WEBUI_ADMIN_PASSWORD", "")
    if not old and email and password and db.execute('SELECT COUNT(*) FROM "user"').fetchone()[0] == 0:
        add_account(db, email, password, os.environ.get("WEBUI_ADMIN_NAME", "Admin"), "admin")
        config["ENABLE_SIGNUP"] = False
    return config


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
    db, old = database(os.environ["DATA_DIR"]), bool(os.environ.get("STANDIN_OPENWEBUI_OLD"))
    web.run_app(make_app(db, starting_config(db, old), old), host=args.host, port=args.port, print=None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
