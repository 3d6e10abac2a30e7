"""Open WebUI in front of an engine: the private ChatGPT most self-hosting teams actually run.

Open WebUI comes from an environment of its own (its install is several GB, so it is never a dependency of
ours): `--ui-python /path/to/bin/python`, else `$BENCH_OPENWEBUI` (that environment's folder, or its
`open-webui` executable), else `open-webui` on PATH. It is started offline and bound to 127.0.0.1: no hub
downloads, no telemetry, no title/tag/follow-up generation requests (they would add load that the user did
not send), configuration from the environment on every start (nothing persisted overrides it), pointed at
the engine's OpenAI URL and given its key (`--api-key-env`'s value, never written), with a data directory of
its own. The first start creates bench's admin account (its password kept in the data directory, readable by
its owner only) and sign-up is closed for good; an admin that is not bench's is refused by name
(`engines.openwebui_account`). Every start signs in and makes an API key, with which the load generator talks
to Open WebUI's own chat API (`/api/v1/chat/completions`), the way its browser page does. Like every launched
process, it must be the one answering on its port before anything (a password) is sent there
(`engines.launch`). The UI stops on every path, before the engine behind it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import httpx

from engines.endpoint import EndpointError, read_api_key
from engines.launch import EngineStartError, ProcessSpec, Started, local_port, run_process
from engines.openwebui_account import CREDENTIALS, UiAccount, admin_environment, saved_credentials, sign_in
from engines.openwebui_page import PageCheck, check_page
from engines.types import Endpoint, EngineInfo, Launcher

UI_ENV = "BENCH_OPENWEBUI"
UI_KEY_ENV = "BENCH_OPENWEBUI_API_KEY"  # the key made at sign-in, for the load generator; never written
UI_LOG = "openwebui.log"
VIA_UI = " via Open WebUI"  # added to the engine's name when measured through the UI
ANSWER_KEPT = 300  # characters of the page's answer kept in run.json
__all__ = ["CREDENTIALS", "FIXED_ENV", "RunningUi", "UiAccount", "find_openwebui", "launch_openwebui",
           "through_openwebui"]
INSTALL_HINT = ("python3.11 -m venv /opt/openwebui && /opt/openwebui/bin/pip install torch==2.13.0 open-webui, "
                f"then ${UI_ENV}=/opt/openwebui (or --ui-python /opt/openwebui/bin/python)")

# Offline, quiet and stateless in configuration: what a measured UI must be.
FIXED_ENV = {
    "OFFLINE_MODE": "true", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
    "ANONYMIZED_TELEMETRY": "false", "SCARF_NO_ANALYTICS": "true", "DO_NOT_TRACK": "true",
    "ENABLE_PERSISTENT_CONFIG": "false", "ENABLE_OLLAMA_API": "false", "ENABLE_OPENAI_API": "true",
    "ENABLE_TITLE_GENERATION": "false", "ENABLE_TAGS_GENERATION": "false", "ENABLE_FOLLOW_UP_GENERATION": "false",
    "ENABLE_AUTOCOMPLETE_GENERATION": "false", "ENABLE_RETRIEVAL_QUERY_GENERATION": "false",
    "ENABLE_SEARCH_QUERY_GENERATION": "false", "ENABLE_WEB_SEARCH": "false", "ENABLE_IMAGE_GENERATION": "false",
    "ENABLE_VERSION_UPDATE_CHECK": "false", "ENABLE_COMMUNITY_SHARING": "false",
    "RAG_EMBEDDING_ENGINE": "openai",  # no local embedding model to load (it would be fetched from a hub)
    "RAG_EMBEDDING_MODEL_AUTO_UPDATE": "false", "ENABLE_API_KEYS": "true",
    "DEFAULT_USER_ROLE": "pending", "USER_AGENT": "llm-selfhost-bench",
}


@dataclass(frozen=True)
class RunningUi:
    root: str  # http://127.0.0.1:PORT
    account: UiAccount
    started: Started
    version: str | None

    def endpoint(self, model: str) -> Endpoint:
        """Open WebUI's OpenAI-compatible chat API, with the key made at sign-in."""
        return Endpoint(self.root + "/api/v1", model, UI_KEY_ENV)


def find_openwebui(ui_python: str | None = None) -> str:
    """The open-webui executable; a one-line error saying how to install it otherwise."""
    if ui_python:
        beside = Path(ui_python).parent / "open-webui"
        if not beside.is_file():
            raise EngineStartError(f"--ui-python {ui_python}: no open-webui beside it; {INSTALL_HINT}")
        return str(beside)
    given = os.environ.get(UI_ENV)
    if given:
        path = Path(given)
        candidate = path / "bin" / "open-webui" if path.is_dir() else path
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            raise EngineStartError(f"${UI_ENV}={given} holds no open-webui executable; {INSTALL_HINT}")
        return str(candidate)
    beside = Path(sys.executable).parent / "open-webui"
    found = str(beside) if beside.is_file() else shutil.which("open-webui")
    if found is None:
        raise EngineStartError(f"Open WebUI is not installed: {INSTALL_HINT}")
    return found


def ui_environment(engine: Endpoint, root: str, data_dir: Path, saved: dict[str, object]) -> dict[str, str]:
    """Open WebUI's whole configuration for one start: the engine's key, if it wants one, passed (never
    written), and bench's admin made or sign-up closed. Its page streams answers over a websocket that only
    its own origin (`root`) may open."""
    try:
        key = read_api_key(engine.api_key_env)
    except EndpointError as exc:
        raise EngineStartError(f"Open WebUI in front of {engine.base_url}: {exc}") from None
    return {**FIXED_ENV, **admin_environment(data_dir, saved), "DATA_DIR": str(data_dir),
            "WEBUI_SECRET_KEY": str(saved["secret_key"]), "CORS_ALLOW_ORIGIN": root,
            "OPENAI_API_BASE_URL": engine.base_url.rstrip("/"), "OPENAI_API_KEY": key or "none",
            "HF_HOME": str(data_dir / "hf")}


def private_directory(data_dir: Path) -> None:
    """The UI's data directory (accounts, API keys, chats) its owner's only: 0700, and the files already in it
    0600 (one made before this rule, or by another tool); what the UI makes from now on is private by umask."""
    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir.chmod(0o700)
    for path in data_dir.rglob("*"):
        if not path.is_symlink():
            path.chmod(0o700 if path.is_dir() else 0o600)


def wait_for_model(root: str, account: UiAccount, model: str, timeout_s: float = 30.0) -> None:
    """Open WebUI lists the engine's models once it has asked the engine; until then a chat would fail."""
    deadline = time.monotonic() + timeout_s
    listed: list[str] = []
    while time.monotonic() < deadline:
        try:
            response = httpx.get(root + "/api/models", headers={"Authorization": f"Bearer {account.api_key}"},
                                 timeout=10)
            listed = [str(m.get("id")) for m in response.json().get("data", [])]
        except (httpx.HTTPError, ValueError, AttributeError):
            listed = []
        if model in listed:
            return
        time.sleep(0.5)
    raise EngineStartError(f"Open WebUI does not list the engine's model '{model}' (it lists: "
                           f"{', '.join(listed) or 'none'}); see {UI_LOG}")


@contextmanager
def launch_openwebui(log_dir: Path, engine: Endpoint, data_dir: Path, port: int | None = None,
                     ui_python: str | None = None, ready_timeout_s: float = 240.0) -> Iterator[RunningUi]:
    """Open WebUI in front of `engine`, signed in, its model listed; stopped on leaving, however left."""
    executable = find_openwebui(ui_python)
    private_directory(data_dir)
    saved = saved_credentials(data_dir)
    try:
        port, root = local_port(port)
    except EngineStartError:
        raise EngineStartError(f"port {port} is already in use on 127.0.0.1; give Open WebUI another with "
                               "--ui-port") from None
    spec = ProcessSpec("open-webui", [executable, "serve", "--host", "127.0.0.1", "--port", str(port)],
                       [root + "/health"], env=ui_environment(engine, root, data_dir, saved),
                       ready_timeout_s=ready_timeout_s, private=True)
    with run_process(spec, log_dir / UI_LOG) as started:
        account = sign_in(root, data_dir, saved)
        os.environ[UI_KEY_ENV] = account.api_key  # read by name when requests are sent, like any API key
        try:
            wait_for_model(root, account, engine.model)
            yield RunningUi(root, account, started, _version(root))
        finally:
            os.environ.pop(UI_KEY_ENV, None)


def _version(root: str) -> str | None:
    try:
        version = httpx.get(root + "/api/version", timeout=5).json().get("version")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return str(version) if version else None


def through_openwebui(engine: Launcher, ui_python: str | None = None) -> Launcher:
    """`engine`, with Open WebUI in front: the load goes through the UI's chat API, the telemetry still
    comes from the engine, and the page is checked once in a browser (its screenshot in the run directory)."""
    find_openwebui(ui_python)  # a missing install is said before any engine starts

    @contextmanager
    def launch(run_dir: Path) -> Iterator[tuple[Endpoint, EngineInfo]]:
        data_dir = Path(tempfile.mkdtemp(prefix="bench-openwebui-"))  # its database: the run's only, then gone
        try:
            with engine(run_dir) as (direct, info), \
                    launch_openwebui(run_dir, direct, data_dir, ui_python=ui_python) as ui:
                page = check_page(ui.root, ui.account.email, ui.account.password, direct.model, run_dir)
                yield _through(direct, info, ui, page)
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)

    return launch


def _through(direct: Endpoint, info: EngineInfo, ui: RunningUi, page: PageCheck) -> tuple[Endpoint, EngineInfo]:
    """Where the load goes (the UI's chat API, the engine's own metrics) and what ran, for run.json."""
    metrics = direct.metrics_url or direct.base_url.rstrip("/").removesuffix("/v1") + "/metrics"
    seen = replace(page, answer=page.answer[:ANSWER_KEPT] if page.answer else page.answer)
    details = {**info.details, "engine_base_url": direct.base_url,
               "ui": {"name": "Open WebUI", "version": ui.version, "base_url": ui.root + "/api/v1",
                      "time_to_ready_s": round(ui.started.time_to_ready_s, 3), "pid": ui.started.pid,
                      "page": asdict(seen)}}
    return replace(ui.endpoint(direct.model), metrics_url=metrics), replace(info, name=info.name + VIA_UI,
                                                                               details=details)
