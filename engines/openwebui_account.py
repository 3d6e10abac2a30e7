"""Open WebUI's admin is bench's, and nobody else signs up while bench runs it.

A data directory's admin is made at its first start: Open WebUI creates it itself from `WEBUI_ADMIN_EMAIL`
and `WEBUI_ADMIN_PASSWORD` (the versions that read them do so before they serve, and close sign-up), or,
on one that does not, bench signs up as the first account, which Open WebUI makes admin. Either way sign-up
is then closed through its admin config API, checked, and every later start has `ENABLE_SIGNUP=false`
from the beginning. An instance whose admin is not bench's (sign-in with bench's saved password fails while
it has accounts, or bench's account is not admin) is refused naming that admin, read from the UI's own
database: bench neither signs in there nor puts its engine behind it.

This module knows Open WebUI's HTTP API and its `user` table; starting the UI is `engines.openwebui`'s.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import httpx

from engines.launch import EngineStartError

CREDENTIALS = "bench-credentials.json"  # in the data directory, its owner's only
ADMIN_EMAIL = "bench@localhost"
ADMIN_NAME = "bench"
DATABASE = "webui.db"  # Open WebUI's own SQLite database in its data directory
ADMIN_MADE = "admin_made"  # in the saved credentials: this data directory's admin is bench's


@dataclass(frozen=True)
class UiAccount:
    email: str
    password: str
    api_key: str


@dataclass(frozen=True)
class Account:
    """One account of the UI, as its database lists it."""

    email: str
    name: str
    role: str  # admin, user or pending


def saved_credentials(data_dir: Path) -> dict[str, object]:
    """This data directory's admin password and secret key, made at its first start (mode 0600)."""
    path = data_dir / CREDENTIALS
    if path.is_file():
        return dict(json.loads(path.read_text()))
    saved = {"email": ADMIN_EMAIL, "password": secrets.token_urlsafe(12), "secret_key": secrets.token_hex(32)}
    _write_private(path, saved)
    return saved


def admin_environment(data_dir: Path, saved: dict[str, object]) -> dict[str, str]:
    """What makes bench's admin at a first start, and closes sign-up at every later one."""
    made = bool(saved.get(ADMIN_MADE)) or bool(accounts(data_dir))
    return {"WEBUI_ADMIN_EMAIL": str(saved["email"]), "WEBUI_ADMIN_PASSWORD": str(saved["password"]),
            "WEBUI_ADMIN_NAME": ADMIN_NAME, "ENABLE_SIGNUP": "false" if made else "true"}


def accounts(data_dir: Path) -> list[Account] | None:
    """The UI's accounts, oldest first, from its database; None where it can't be read (not made yet, or
    kept elsewhere)."""
    database = data_dir / DATABASE
    if not database.is_file():
        return None
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
            rows = db.execute('SELECT email, name, role FROM "user" ORDER BY created_at').fetchall()
    except sqlite3.Error:
        return None
    return [Account(str(email), str(name), str(role)) for email, name, role in rows]


def sign_in(root: str, data_dir: Path, saved: dict[str, object], timeout_s: float = 30.0) -> UiAccount:
    """Sign in as the data directory's admin (signing up first where the UI has no account yet), close
    sign-up, then make an API key; an admin that is not bench's is an EngineStartError naming it."""
    email, password = str(saved["email"]), str(saved["password"])
    login = {"email": email, "password": password}
    with httpx.Client(base_url=root, timeout=timeout_s) as client:
        response = client.post("/api/v1/auths/signin", json=login)
        if response.status_code != 200 and _may_sign_up(data_dir, saved):
            response = client.post("/api/v1/auths/signup", json={**login, "name": ADMIN_NAME})
        session = _json(response)
        if response.status_code != 200 or session.get("role") != "admin":
            raise EngineStartError(_refusal(data_dir, email, response, session))
        headers = {"Authorization": f"Bearer {session['token']}"}
        close_signup(client, headers)
        _write_private(data_dir / CREDENTIALS, {**saved, ADMIN_MADE: True})
        made = client.post("/api/v1/auths/api_key", headers=headers)
        if made.status_code != 200:
            raise EngineStartError(f"Open WebUI made no API key (HTTP {made.status_code}: {made.text[:200]})")
        return UiAccount(email, password, str(made.json()["api_key"]))


def close_signup(client: httpx.Client, headers: dict[str, str]) -> None:
    """Sign-up off through the admin config API (what the admin panel's switch does), and checked off."""
    path = "/api/v1/auths/admin/config"
    config = client.get(path, headers=headers)
    if config.status_code == 200 and config.json().get("ENABLE_SIGNUP") is True:
        client.post(path, headers=headers, json={**config.json(), "ENABLE_SIGNUP": False})
        config = client.get(path, headers=headers)
    if config.status_code != 200 or config.json().get("ENABLE_SIGNUP") is not False:
        raise EngineStartError(f"Open WebUI's sign-up could not be closed (its admin config answered HTTP "
                               f"{config.status_code}: {config.text[:200]}); anyone could make an account, so "
                               "bench stopped it")


def _may_sign_up(data_dir: Path, saved: dict[str, object]) -> bool:
    """Only on a UI with no account yet, whose first account becomes admin: never beside someone else's."""
    found = accounts(data_dir)
    return found == [] or (found is None and not saved.get(ADMIN_MADE))


def _refusal(data_dir: Path, email: str, response: httpx.Response, session: dict[str, object]) -> str:
    admins = [a for a in accounts(data_dir) or [] if a.role == "admin" and a.email != email]
    if admins:
        names = ", ".join(f"{a.email} ({a.name})" for a in admins)
        what = ("bench's account is not its admin" if response.status_code == 200 else
                f"signing in as {email} with bench's saved password failed while it has accounts")
        return (f"Open WebUI's data in {data_dir} has an admin that is not bench's: {names} ({what}); bench "
                "will not sign in there or put its engine behind it. Give --ui-data another folder, or remove "
                f"{data_dir} if that account is not wanted")
    role = f" as {session.get('role')}" if response.status_code == 200 else ""
    return (f"Open WebUI refused to sign in {email}{role} (HTTP {response.status_code}: {response.text[:200]}); "
            "remove its data directory to start afresh")


def _json(response: httpx.Response) -> dict[str, object]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _write_private(path: Path, saved: dict[str, object]) -> None:
    """Written whole, its owner's only, then put in place: a reader never sees half of it."""
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(saved, f)
    os.replace(partial, path)
