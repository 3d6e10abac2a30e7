"""Open WebUI in front of an engine: started offline from its own environment, signed in with a key it made,
measured side by side with the engine direct, and stopped with it. The default suite runs a stand-in
speaking Open WebUI's API (`standin_openwebui`); `pytest -m openwebui` runs the real one and its page."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from engines.launch import EngineStartError
from engines.openwebui import CREDENTIALS, FIXED_ENV, UI_KEY_ENV, find_openwebui, launch_openwebui
from engines.types import Endpoint
from reports.ui_overhead import UiLevel, bottleneck, bottleneck_sentence
from tests.bench.test_cli import bench
from tests.engines import standin_openwebui
from tests.servers import is_running


@pytest.fixture
def standin_ui(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$BENCH_OPENWEBUI is an environment whose `open-webui` is the stand-in; returns where it writes the
    environment it was started with."""
    env_dir = tmp_path / "openwebui-env"
    (env_dir / "bin").mkdir(parents=True)
    script = env_dir / "bin" / "open-webui"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {standin_openwebui.__file__} \"$@\"\n")
    script.chmod(0o755)
    seen = tmp_path / "openwebui-started-with.json"
    monkeypatch.setenv("BENCH_OPENWEBUI", str(env_dir))
    monkeypatch.setenv("STANDIN_OPENWEBUI_ENV", str(seen))
    return seen


def test_the_ui_starts_offline_in_front_of_the_engine_signs_in_and_stops(standin_ui, scripted, tmp_path) -> None:
    engine = Endpoint(scripted.base_url, "scripted")
    data = tmp_path / "data"
    with launch_openwebui(tmp_path, engine, data) as ui:
        started_with = json.loads(standin_ui.read_text())
        assert started_with["argv"][:3] == ["serve", "--host", "127.0.0.1"]
        env = started_with["env"]
        assert {k: env[k] for k in FIXED_ENV} == FIXED_ENV  # offline, no telemetry, no generation tasks
        assert env["OPENAI_API_BASE_URL"] == scripted.base_url and env["DATA_DIR"] == str(data)
        assert env["CORS_ALLOW_ORIGIN"] == ui.root  # its page's websocket, from its own origin only
        endpoint = ui.endpoint("scripted")
        assert endpoint.base_url == ui.root + "/api/v1" and endpoint.api_key_env == UI_KEY_ENV
        key = os.environ[UI_KEY_ENV]
        answer = httpx.post(endpoint.base_url + "/chat/completions", headers={"Authorization": f"Bearer {key}"},
                            json={"model": "scripted", "messages": [{"role": "user", "content": "hi"}],
                                  "max_tokens": 3})
        assert answer.status_code == 200
        pid = ui.started.pid
    assert not is_running(pid) and UI_KEY_ENV not in os.environ
    assert (data / CREDENTIALS).stat().st_mode & 0o777 == 0o600  # the admin's password, its owner's only
    assert (data / "webui.db").stat().st_mode & 0o777 == 0o600  # its accounts and keys, made under umask 077
    assert data.stat().st_mode & 0o777 == 0o700
    (data / "webui.db").chmod(0o644)  # made before this rule, or by another tool: private again at the next start
    # A second start on the same data directory signs in as the same admin.
    with launch_openwebui(tmp_path, engine, data) as again:
        assert again.account.email == ui.account.email and again.account.password == ui.account.password
        assert (data / "webui.db").stat().st_mode & 0o777 == 0o600


def test_through_ui_measures_direct_and_through_the_ui_side_by_side(standin_ui, scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=20, itl_ms=5)
    result = bench("sweep", "--engine", "endpoint", "--base-url", scripted.base_url, "--model", "scripted",
                   "--through-ui", "--concurrency", "1,4", "--duration", "1.5", "--output-tokens", "8",
                   "--out", str(tmp_path / "runs"), env={"BENCH_OPENWEBUI": os.environ["BENCH_OPENWEBUI"]})
    assert result.returncode == 0, result.stderr
    direct, through = sorted((tmp_path / "runs").glob("*-chat"), key=lambda p: "openwebui" in p.name)
    assert "endpoint+openwebui" in through.name
    run = json.loads((through / "run.json").read_text())
    assert run["engine"]["name"] == "endpoint via Open WebUI"
    ui = run["engine"]["details"]["ui"]
    assert ui["version"] == standin_openwebui.VERSION and ui["time_to_ready_s"] > 0
    assert ui["page"]["why_not"].endswith("/auth serves no page")  # the stand-in has no page to look at
    assert run["endpoint"]["base_url"].endswith("/api/v1") and run["endpoint"]["api_key_env"] == UI_KEY_ENV
    summary = json.loads((through / "summary.json").read_text())
    assert [s["num_ok"] > 0 and s["num_failed"] == 0 for s in summary] == [True, True]
    assert "endpoint: direct and through Open WebUI" in result.stdout
    assert "Open WebUI" in result.stdout and ("bottleneck" in result.stdout or "kept up" in result.stdout)
    assert not is_running(ui["pid"])
    comparison = next((tmp_path / "runs").glob("compare-*.md")).read_text()
    assert "Measured through Open WebUI" in comparison and "| c4 |" in comparison
    for path in (p for p in through.rglob("*") if p.is_file()):  # the UI's key is never written
        assert "sk-" not in path.read_text(errors="replace"), path.name


def test_a_missing_open_webui_is_one_line_before_anything_starts(tmp_path) -> None:
    env = {"BENCH_OPENWEBUI": str(tmp_path / "nowhere")}
    result = bench("sweep", "--engine", "openwebui", "--requests", "1", "--out", str(tmp_path / "runs"), env=env)
    assert result.returncode == 2, result.stdout
    assert f"$BENCH_OPENWEBUI={tmp_path / 'nowhere'} holds no open-webui executable" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()
    with pytest.raises(EngineStartError, match="--ui-python /no/python: no open-webui beside it"):
        find_openwebui("/no/python")


def test_a_ui_port_in_use_is_one_line_naming_the_flag(standin_ui, scripted, tmp_path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        with pytest.raises(EngineStartError, match=f"port {port} is already in use .* with --ui-port"):
            with launch_openwebui(tmp_path, Endpoint(scripted.base_url, "scripted"), tmp_path / "data", port):
                pass


def test_the_ui_is_the_bottleneck_at_the_first_level_it_keeps_too_little_of() -> None:
    def level(label: str, direct: float, ui: float) -> UiLevel:
        return UiLevel(label, 1, 10.0, 15.0, 2.0, 2.5, direct, ui)

    kept = [level("c1", 100, 98), level("c8", 400, 380)]
    assert bottleneck(kept) is None and "kept up at every level" in bottleneck_sentence(kept)
    limited = [*kept, level("c32", 900, 500), level("c64", 1000, 450)]
    assert bottleneck(limited) == limited[2]
    assert bottleneck_sentence(limited).startswith("Open WebUI becomes the bottleneck at c32: 56%")
    assert limited[0].ttft_added_ms == 5.0 and limited[0].itl_added_ms == 0.5


def test_a_ratio_whose_interval_holds_1_is_within_noise_and_one_below_1_is_the_bottleneck() -> None:
    # The pair: 12 requests through the UI against 13 direct in 15 s, 97.1 vs 108.5 tokens/s: ratio 0.895;
    # the log ratio's standard error sqrt(1/12 + 1/13) = 0.4003, so 0.895 x exp(-/+1.96 x 0.4003) = 0.41 to 1.96.
    noisy = UiLevel("c1", 1, 100.0, 110.0, 20.0, 21.0, 108.5, 97.1, requests_direct=13, requests_ui=12)
    low, high = noisy.share_interval  # type: ignore[misc]
    assert (round(low, 2), round(high, 2)) == (0.41, 1.96) and not noisy.is_bottleneck
    assert bottleneck_sentence([noisy]) == (
        "Open WebUI is not shown to be the bottleneck: at c1 within noise (ratio 0.89, interval 0.41-1.96, 12 "
        "against 13 requests): repeat, or lengthen --duration, to tell")
    # 200 against 400 requests: 0.5 x exp(-/+1.96 x sqrt(1/400 + 1/200)) = 0.42 to 0.59, below 1
    clear = UiLevel("c32", 32, 100.0, 300.0, 20.0, 40.0, 1000.0, 500.0, requests_direct=400, requests_ui=200)
    assert clear.is_bottleneck and bottleneck([noisy, clear]) == clear
    assert bottleneck_sentence([noisy, clear]) == ("Open WebUI becomes the bottleneck at c32: 50% of the direct "
                                                   "output tokens/s, 95 % interval 42%-59% (500.0 vs 1000.0)")


@pytest.mark.openwebui
def test_the_real_open_webui_answers_in_its_page_and_the_report_shows_it(tmp_path) -> None:
    """The real Open WebUI ($BENCH_OPENWEBUI) in front of the reference engine, its page driven in headless
    Chromium: the screenshot in the run directory and in the report, the levels side by side."""
    if not os.environ.get("BENCH_OPENWEBUI"):
        pytest.fail("set BENCH_OPENWEBUI to Open WebUI's environment (see the README)")
    result = bench("sweep", "--engine", "openwebui", "--model", "default", "--concurrency", "1,4", "--duration", "5",
                   "--input-tokens", "32", "--output-tokens", "16", "--out", str(tmp_path), timeout=900)
    assert result.returncode == 0, result.stderr
    through = next(tmp_path.glob("*reference+openwebui-chat"))
    page = json.loads((through / "run.json").read_text())["engine"]["details"]["ui"]["page"]
    assert page["why_not"] is None and page["answer"], page
    assert (through / "openwebui.png").stat().st_size > 10_000
    comparison = next(tmp_path.glob("compare-*.html")).read_text()
    assert "headless Chromium" in comparison and comparison.count("data:image/png;base64,") >= 2
    assert "reference: direct and through Open WebUI" in result.stdout


def test_bench_serve_ui_prints_where_and_how_to_sign_in_and_stops_both(standin_ui, tmp_path) -> None:
    import re
    import signal
    import subprocess

    from engines.launch import free_port
    from tests.bench.test_cli import BENCH

    ui_port = free_port()
    process = subprocess.Popen([*BENCH, "serve", "--model", "dummy:tiny", "--ui", "--ui-port", str(ui_port),
                                "--ui-data", str(tmp_path / "ui-data")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        engine_line, ui_line, data_line = (process.stdout.readline() for _ in range(3))
        engine_url = re.search(r"reference engine at (http://127\.0\.0\.1:\d+/v1)", engine_line)
        assert engine_url, engine_line
        assert f"Open WebUI {standin_openwebui.VERSION} at http://127.0.0.1:{ui_port}: sign in as bench@localhost " \
               "with password " in ui_line, ui_line
        password = re.search(r"with password (\S+) ", ui_line).group(1)  # type: ignore[union-attr]
        data = tmp_path / "ui-data"
        assert f"Open WebUI's data (accounts, API keys, chats) stays in {data}, its owner's only (0700)" in data_line
        assert f"remove it with: rm -rf {data}" in data_line and data.stat().st_mode & 0o777 == 0o700
        saved = json.loads((tmp_path / "ui-data" / CREDENTIALS).read_text())
        assert saved["password"] == password
        signed_in = httpx.post(f"http://127.0.0.1:{ui_port}/api/v1/auths/signin",
                               json={"email": "bench@localhost", "password": password})
        assert signed_in.status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    assert f"stopped; Open WebUI's data (accounts, API keys, chats) stays in {tmp_path / 'ui-data'}" in rest
    for url in (f"http://127.0.0.1:{ui_port}/health", engine_url.group(1) + "/models"):
        with pytest.raises(httpx.ConnectError):
            httpx.get(url, timeout=2)


def test_a_label_through_the_ui_gives_the_engines_version_and_the_uis_own() -> None:
    from bench.run.runinfo import EngineDetails, EngineRecord, UiRecord

    through = EngineRecord(name="reference via Open WebUI", version="0.1.0",
                           details=EngineDetails(ui=UiRecord(name="Open WebUI", version="0.12.4")))
    assert through.label == "reference 0.1.0 via Open WebUI 0.12.4"
    assert EngineRecord(name="reference", version="0.1.0").label == "reference 0.1.0"


def _sign_up(root: str, email: str) -> httpx.Response:
    return httpx.post(root + "/api/v1/auths/signup", json={"email": email, "password": "pw", "name": "mallory"})


def test_bench_is_the_admin_from_the_first_start_and_nobody_else_can_sign_up(standin_ui, scripted, tmp_path) -> None:
    """The attack: whoever signs up first on a fresh UI is its admin, and sign-up stayed open. Now bench's
    admin is made at start (WEBUI_ADMIN_EMAIL/PASSWORD), sign-up is closed, and stays closed at later starts."""
    from engines.openwebui_account import ADMIN_MADE, Account, accounts

    engine, data = Endpoint(scripted.base_url, "scripted"), tmp_path / "data"
    with launch_openwebui(tmp_path, engine, data) as ui:
        env = json.loads(standin_ui.read_text())["env"]
        assert env["WEBUI_ADMIN_EMAIL"] == ui.account.email and env["WEBUI_ADMIN_PASSWORD"] == ui.account.password
        assert _sign_up(ui.root, "mallory@localhost").status_code == 403
    assert accounts(data) == [Account("bench@localhost", "bench", "admin")]
    assert json.loads((data / CREDENTIALS).read_text())[ADMIN_MADE] is True
    with launch_openwebui(tmp_path, engine, data) as again:
        assert json.loads(standin_ui.read_text())["env"]["ENABLE_SIGNUP"] == "false"  # closed from the start
        assert _sign_up(again.root, "mallory@localhost").status_code == 403
    assert [a.email for a in accounts(data) or []] == ["bench@localhost"]


def test_an_older_ui_gets_bench_as_its_first_account_then_sign_up_closed_through_its_admin_api(
        standin_ui, scripted, tmp_path, monkeypatch) -> None:
    """An Open WebUI that ignores WEBUI_ADMIN_* and leaves sign-up open: bench signs up first (the first
    account is admin) and turns sign-up off through the admin config API before anything else."""
    from engines.openwebui_account import accounts

    monkeypatch.setenv("STANDIN_OPENWEBUI_OLD", "1")
    with launch_openwebui(tmp_path, Endpoint(scripted.base_url, "scripted"), tmp_path / "data") as ui:
        assert json.loads(standin_ui.read_text())["env"]["ENABLE_SIGNUP"] == "true"  # no account yet
        assert _sign_up(ui.root, "mallory@localhost").status_code == 403
        token = httpx.post(ui.root + "/api/v1/auths/signin",
                           json={"email": ui.account.email, "password": ui.account.password}).json()["token"]
        config = httpx.get(ui.root + "/api/v1/auths/admin/config", headers={"Authorization": f"Bearer {token}"})
        assert config.json()["ENABLE_SIGNUP"] is False
    assert [(a.email, a.role) for a in accounts(tmp_path / "data") or []] == [("bench@localhost", "admin")]


def test_an_admin_that_is_not_benchs_is_refused_by_name_and_the_ui_stopped(standin_ui, scripted, tmp_path) -> None:
    """Someone signed up first (or the data directory is another's): bench's sign-in fails while the UI has
    accounts. The launch is refused naming that admin; nothing of bench's keeps running."""
    from engines import lifeline

    data = tmp_path / "data"
    data.mkdir()
    db = standin_openwebui.database(str(data))
    standin_openwebui.add_account(db, "mallory@localhost", "hers", "mallory", "admin")
    db.close()
    with pytest.raises(EngineStartError) as error:
        with launch_openwebui(tmp_path, Endpoint(scripted.base_url, "scripted"), data):
            pytest.fail("a UI whose admin is someone else's was used")
    message = str(error.value)
    assert f"Open WebUI's data in {data} has an admin that is not bench's: mallory@localhost (mallory)" in message
    assert "signing in as bench@localhost with bench's saved password failed while it has accounts" in message
    assert lifeline.marked_processes(lifeline.owner_id()) == {}  # the UI was stopped
    env = json.loads(standin_ui.read_text())["env"]
    assert env["ENABLE_SIGNUP"] == "false"  # it had accounts: bench did not open sign-up to make its own


@contextmanager
def keyed_engine(key: str) -> Iterator[str]:
    """A real aiohttp server in a thread that serves model `keyed` only to `Authorization: Bearer <key>`."""
    import asyncio
    import threading

    from aiohttp import web

    from engines.launch import free_port

    async def guarded(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": {"message": "invalid API key"}}, status=401)
        if request.method == "GET":
            return web.json_response({"object": "list", "data": [{"id": "keyed", "object": "model"}]})
        return web.json_response({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                               "finish_reason": "stop"}]})

    app = web.Application()
    app.add_routes([web.get("/v1/models", guarded), web.post("/v1/chat/completions", guarded)])
    runner, port, loop = web.AppRunner(app), free_port(), asyncio.new_event_loop()
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def test_the_ui_asks_the_engine_with_the_engines_key(standin_ui, tmp_path, monkeypatch) -> None:
    """An engine that wants a key: Open WebUI gets its value (not `none`), so it lists the engine's model and
    a chat through it is answered; a key variable that is not set is said before the UI starts."""
    monkeypatch.setenv("ENGINE_KEY_FOR_TEST", "k-engine-7f3a")
    with keyed_engine("k-engine-7f3a") as base_url:
        engine = Endpoint(base_url, "keyed", api_key_env="ENGINE_KEY_FOR_TEST")
        with launch_openwebui(tmp_path, engine, tmp_path / "data") as ui:
            assert json.loads(standin_ui.read_text())["env"]["OPENAI_API_KEY"] == "k-engine-7f3a"
            answer = httpx.post(ui.root + "/api/v1/chat/completions",
                                headers={"Authorization": f"Bearer {os.environ[UI_KEY_ENV]}"},
                                json={"model": "keyed", "messages": [{"role": "user", "content": "hi"}]})
            assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "hi"
        monkeypatch.delenv("ENGINE_KEY_FOR_TEST")
        standin_ui.unlink()
        with pytest.raises(EngineStartError, match="--api-key-env names ENGINE_KEY_FOR_TEST, but that environment "
                                                   "variable is not set"):
            with launch_openwebui(tmp_path, engine, tmp_path / "data"):
                pass
        assert not standin_ui.exists()  # refused before the UI started


def test_a_squatted_ui_port_is_refused_before_bench_signs_in_there(standin_ui, scripted, tmp_path,
                                                                   monkeypatch) -> None:
    """The port chosen for the UI is bound by another local process first, answering /health as the UI would.
    The launch is refused naming it, and that process never receives bench's admin password."""
    import engines.launch as launch
    from engines import lifeline
    from tests.engines.test_launch import squatter

    port = launch.free_port()
    monkeypatch.setattr(launch, "free_port", lambda host="127.0.0.1": port)  # the race, made certain
    seen = tmp_path / "squatter-saw.log"
    with squatter(port, seen) as squat:
        with pytest.raises(EngineStartError, match=f"port {port} was taken by another process \\(pid {squat.pid}, "):
            with launch_openwebui(tmp_path, Endpoint(scripted.base_url, "scripted"), tmp_path / "data"):
                pytest.fail("bench used a UI it did not start")
    assert "/api/v1/auths" not in seen.read_text()  # readiness only: no sign-in, no password
    assert lifeline.marked_processes(lifeline.owner_id()) == {}


@pytest.mark.openwebui
def test_the_real_open_webui_has_benchs_admin_sign_up_closed_and_the_engines_key(tmp_path, monkeypatch) -> None:
    """The real Open WebUI ($BENCH_OPENWEBUI) in front of an engine that answers only with its key: bench is
    the admin from the first start, nobody else can sign up (at that start or the next), and a chat through the
    UI reaches the engine with the key, which was given to the UI by its environment."""
    from engines.openwebui_account import accounts

    if not os.environ.get("BENCH_OPENWEBUI"):
        pytest.fail("set BENCH_OPENWEBUI to Open WebUI's environment (see the README)")
    monkeypatch.setenv("ENGINE_KEY_FOR_TEST", "k-engine-real-9c1e")
    data = tmp_path / "data"
    with keyed_engine("k-engine-real-9c1e") as base_url:
        engine = Endpoint(base_url, "keyed", api_key_env="ENGINE_KEY_FOR_TEST")
        for start in ("first", "second"):
            with launch_openwebui(tmp_path, engine, data) as ui:
                assert _sign_up(ui.root, f"mallory-{start}@localhost").status_code == 403, start
                answer = httpx.post(ui.root + "/api/v1/chat/completions", timeout=60,
                                    headers={"Authorization": f"Bearer {os.environ[UI_KEY_ENV]}"},
                                    json={"model": "keyed", "messages": [{"role": "user", "content": "hi"}]})
                assert answer.status_code == 200, answer.text
                assert answer.json()["choices"][0]["message"]["content"] == "hi"
            assert [(a.email, a.role) for a in accounts(data) or []] == [("bench@localhost", "admin")], start
