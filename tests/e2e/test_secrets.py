"""No secret is ever written: a canary API key and token given to `bench sweep` (as flags and in an engine file)
and to `bench serve` are found in no file bench writes (run directory, report, history and its page), in none of
its output and on no process's command line, while the engine they were given to still demands the key."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.bench.test_cli import BENCH, bench, only_run_dir

TINY = ["--model", "dummy:tiny", "--input-tokens", "16", "--output-tokens", "4", "--concurrency", "1",
        "--requests", "2"]


def canary(kind: str) -> str:
    return f"{kind}-canary-{secrets.token_hex(8)}"


class CommandLines:
    """Every process's command line, read again and again while a command runs: which held a canary, and how
    each engine seen (ours, vLLM) answered a request that brought no key."""

    def __init__(self, canaries: list[str]) -> None:
        self.canaries = [c.encode() for c in canaries]
        self.leaks: list[str] = []
        self.keyless_status: dict[int, int] = {}  # an engine's port -> what /v1/models answered without a key
        self._stop = threading.Event()

    def watch(self) -> None:
        while not self._stop.wait(0.05):
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    self._look_at(entry)

    def _look_at(self, entry: Path) -> None:
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            return
        if any(c in cmdline for c in self.canaries) and b"-m\0bench\0" not in cmdline:  # bench's own: as typed
            self.leaks.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
        port = re.search(rb"(?:engines\.reference|vllm\.entrypoints\.openai\.api_server)\x00.*--port\x00(\d+)", cmdline)
        if port and int(port.group(1)) not in self.keyless_status and descends_from_us(int(entry.name)):
            try:
                answer = httpx.get(f"http://127.0.0.1:{int(port.group(1))}/v1/models", timeout=2)
            except httpx.HTTPError:
                return  # not listening yet
            self.keyless_status[int(port.group(1))] = answer.status_code

    @contextmanager
    def running(self) -> Iterator[CommandLines]:
        thread = threading.Thread(target=self.watch, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(5)


def descends_from_us(pid: int) -> bool:
    """Whether `pid` was started by this test process (other engines may run on a shared machine)."""
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid == os.getpid():
            return True
    return False


def files_holding(folder: Path, *canaries: str) -> list[str]:
    return [str(path) for path in folder.rglob("*") if path.is_file()
            and any(c.encode() in path.read_bytes() for c in canaries)]


def test_an_api_key_given_as_an_engine_arg_is_sent_but_never_written(tmp_path) -> None:
    key = canary("key")
    out = tmp_path / "runs"
    with CommandLines([key]).running() as seen:
        result = bench("sweep", *TINY, "--engine-arg", f"api-key={key}", "--out", str(out), timeout=240)
    assert result.returncode == 0, result.stderr  # bench's own checks and its client sent the key
    assert seen.keyless_status and set(seen.keyless_status.values()) == {401}  # the engine wanted it
    assert seen.leaks == []
    run_dir = only_run_dir(out)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["engine_spec"]["args"] == {"api-key": "***"}
    assert run["status"] == "complete" and (run_dir / "report.html").is_file()
    # the history holds every level, valid or not (a busy machine can make the client fall behind): read it whole
    with sqlite3.connect(out / ".history" / "history.sqlite") as db:
        args = [json.loads(row[0]) for row in db.execute("SELECT engine_args FROM levels")]
    assert args and all(a == {"api-key": "***"} for a in args)
    assert files_holding(tmp_path, key) == []
    assert key not in result.stdout + result.stderr


def test_an_engine_files_secrets_are_never_written_and_a_resume_without_them_is_refused(tmp_path) -> None:
    key, token = canary("key"), canary("token")
    engine_file = tmp_path / "engine.yaml"
    engine_file.write_text(f"engine: reference\nmodel: dummy:tiny\nargs: {{api-key: {key}}}\n"
                           f"env: {{HF_TOKEN: {token}, KEPT_SETTING: '1'}}\n")
    out = tmp_path / "runs"
    with CommandLines([key, token]).running() as seen:
        result = bench("sweep", "--engine-file", str(engine_file), *TINY[2:], "--out", str(out), timeout=240)
    assert result.returncode == 0, result.stderr
    assert set(seen.keyless_status.values()) == {401} and seen.leaks == []
    run_dir = only_run_dir(out)
    spec = json.loads((run_dir / "run.json").read_text())["engine_spec"]
    assert spec["args"] == {"api-key": "***"} and spec["env"] == {"HF_TOKEN": "***", "KEPT_SETTING": "1"}
    assert files_holding(out, key, token) == []
    assert oct((run_dir.stat().st_mode) & 0o777) == "0o700" and "private to its owner" in result.stdout

    run_json = run_dir / "run.json"
    run_json.write_text(run_json.read_text().replace('"status": "complete"', '"status": "interrupted"'))
    resumed = bench("sweep", "--resume", str(run_dir), timeout=60)
    assert resumed.returncode == 2
    assert "--engine-arg api-key, env HF_TOKEN" in resumed.stderr and "${NAME}" in resumed.stderr


def test_secrets_written_as_variable_references_are_read_at_launch(tmp_path) -> None:
    key = canary("key")
    engine_file = tmp_path / "engine.yaml"
    engine_file.write_text("engine: reference\nmodel: dummy:tiny\nargs: {api-key: '${MY_ENGINE_KEY}'}\n")
    out = tmp_path / "runs"
    with CommandLines([key]).running() as seen:
        result = bench("sweep", "--engine-file", str(engine_file), *TINY[2:], "--out", str(out),
                       env={"MY_ENGINE_KEY": key}, timeout=240)
    assert result.returncode == 0, result.stderr
    assert set(seen.keyless_status.values()) == {401} and seen.leaks == []
    spec = json.loads((only_run_dir(out) / "run.json").read_text())["engine_spec"]
    assert spec["args"] == {"api-key": "${MY_ENGINE_KEY}"}  # a name is no secret, and a resume reads it again
    assert files_holding(out, key) == []
    unset = bench("sweep", "--engine-file", str(engine_file), *TINY[2:], "--out", str(tmp_path / "other"))
    assert unset.returncode == 2 and "${MY_ENGINE_KEY} names the environment variable MY_ENGINE_KEY" in unset.stderr


def test_a_secret_an_engine_takes_only_on_its_command_line_is_refused(tmp_path) -> None:
    result = bench("sweep", "--engine", "sglang", "--engine-arg", "api-key=abc", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "--engine-arg api-key: sglang takes it only on its command line" in result.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


@pytest.mark.parametrize("stack", [["--replicas", "2"], []])
def test_bench_serve_takes_its_key_from_the_environment_and_passes_it_to_its_engines(stack: list[str]) -> None:
    from engines.launch import free_port

    key = canary("key")
    port = free_port()
    with CommandLines([key]).running() as seen:
        process = subprocess.Popen([*BENCH, "serve", *stack, "--model", "dummy:tiny", "--port", str(port),
                                    "--api-key-env", "MY_SERVE_KEY"], env={**os.environ, "MY_SERVE_KEY": key},
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            while "ready" not in line and " at http" not in line and line:
                line = process.stdout.readline()
            url = f"http://127.0.0.1:{port}/v1"
            with_key = httpx.get(url + "/models", headers={"Authorization": f"Bearer {key}"}, timeout=10)
            assert with_key.status_code == 200, with_key.text
            body = {"model": with_key.json()["data"][0]["id"], "prompt": "hi", "max_tokens": 2}
            keyless = httpx.post(url + "/completions", json=body, timeout=60)
            assert keyless.status_code == 401, keyless.text  # behind the router too, each replica asks for it
            answer = httpx.post(url + "/completions", headers={"Authorization": f"Bearer {key}"}, json=body,
                                timeout=60)
            assert answer.status_code == 200, answer.text  # and the router passes the client's key on
        finally:
            process.send_signal(signal.SIGTERM)
            output = process.communicate(timeout=60)[0]
    assert seen.leaks == [] and key not in output
