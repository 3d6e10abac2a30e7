"""A stand-in for LM Studio's CLI, `lms`, speaking the commands the launcher uses and LM Studio's OpenAI API:

    lms version | lms ls --json | lms server start --port P | lms load MODEL [--context-length N]
    lms unload --all | lms server stop | lms server status

`server start` starts the API server in the background (as LM Studio's own service does) and returns; its
state (pid, port, loaded models) lives in `$STANDIN_LMS_STATE` (a JSON file), and every command is appended
to it, so tests can see what ran. The API serves the models loaded, with a streaming chat.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

DOWNLOADED = ["qwen2.5-0.5b-instruct", "llama-3.2-1b-instruct"]
VERSION_TEXT = "lms - LM Studio CLI - v0.0.47-standin"


def state_path() -> Path:
    return Path(os.environ["STANDIN_LMS_STATE"])


def read_state() -> dict:
    path = state_path()
    return json.loads(path.read_text()) if path.is_file() else {"commands": [], "loaded": []}


def write_state(state: dict) -> None:
    state_path().write_text(json.dumps(state))


def serve(port: int) -> None:
    """The API server: /v1/models lists what is loaded (read from the state file at each request)."""
    sys.path.insert(0, str(Path(__file__).parents[2]))
    from aiohttp import web

    from tests.engines.standin_engine import chat_routes

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model"}
                                                             for m in read_state()["loaded"]]})

    app = web.Application()
    routes = [r for r in chat_routes(DOWNLOADED) if r.path != "/v1/models"]  # type: ignore[attr-defined]
    app.add_routes([web.get("/v1/models", models), *routes])
    web.run_app(app, host="127.0.0.1", port=port, print=None)


def main(argv: list[str]) -> int:
    state = read_state()
    state["commands"].append(argv)
    write_state(state)
    if argv == ["version"]:
        print(VERSION_TEXT)
    elif argv == ["ls", "--json"]:
        print(json.dumps([{"type": "llm", "modelKey": m, "path": f"lmstudio-community/{m}"} for m in DOWNLOADED]))
    elif argv[:3] == ["server", "start", "--port"]:
        port = int(argv[3])
        server = subprocess.Popen([sys.executable, __file__, "_serve", str(port)], start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        state = read_state()
        state["server"] = {"pid": server.pid, "port": port}
        write_state(state)
        for _ in range(100):  # `lms server start` returns once the server answers
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        print(f"Success! Server is now running on port {port}")
    elif argv[:1] == ["load"]:
        if argv[1] not in DOWNLOADED:
            print(f"Error: model not found: {argv[1]}", file=sys.stderr)
            return 1
        state["loaded"].append(argv[1])
        write_state(state)
        print(f"Model loaded: {argv[1]}")
    elif argv == ["unload", "--all"]:
        state["loaded"] = []
        write_state(state)
    elif argv == ["server", "stop"]:
        server = state.pop("server", None)
        if server:
            os.kill(server["pid"], signal.SIGTERM)
        write_state(state)
        print("Stopped the server")
    elif argv[:1] == ["_serve"]:
        serve(int(argv[1]))
    else:
        print(f"standin lms: unknown command {argv}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
