"""SGLang and Ollama as local processes: the commands and environments they get, the errors that name what to
change, and their whole lifecycle against a stand-in that speaks their protocol (neither engine can be
installed here)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
import time
from pathlib import Path

import httpx
import pytest

from engines.availability import _ollama_availability, _sglang_availability
from engines.engine_file import EngineFile
from engines.launch import EngineStartError
from engines.process import (
    SGLANG_PYTHON_ENV,
    checkpoint_model,
    engine_python,
    launch_local,
    ollama_engine,
    sglang_engine,
)
from engines.registry import make_launcher
from engines.types import Endpoint
from loadgen.client import ClientOptions, open_session, send_request
from loadgen.types import RequestRecord, RequestSpec
from tests.engines import standin_engine
from tests.servers import is_running

STANDIN = Path(standin_engine.__file__)
READY_TIMEOUT_S = 30.0


def standin_executable(folder: Path, name: str, kind: str) -> tuple[Path, Path]:
    """An executable `folder/name` that runs the stand-in as `kind`; and the file it records its start in."""
    folder.mkdir(parents=True, exist_ok=True)
    record = folder / f"{name}.started.json"
    executable = folder / name
    command = shlex.join([sys.executable, str(STANDIN), kind, str(record)])
    executable.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
    executable.chmod(0o755)
    return executable, record


@pytest.fixture
def standin_ollama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in `ollama` first on PATH; returns the file it records its start in."""
    _, record = standin_executable(tmp_path / "bin", "ollama", "ollama")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    for name in ("OLLAMA_MODELS", "OLLAMA_NUM_PARALLEL", "OLLAMA_KEEP_ALIVE"):
        monkeypatch.delenv(name, raising=False)
    return record


def one_chat_request(endpoint: Endpoint, max_tokens: int = 5) -> RequestRecord:
    """One streaming request through the load generator's own client."""

    async def send() -> RequestRecord:
        options = ClientOptions(endpoint.base_url, endpoint.model)
        async with open_session(options) as session:
            record = RequestRecord("test", "standin", "1", request_id=0, send_s=0.0)
            spec = RequestSpec(0, "chat", "say something short", max_tokens)
            return await send_request(session, spec, options, record, time.perf_counter)

    return asyncio.run(send())


# --- commands and errors ---------------------------------------------------------------------------------


def test_sglang_command_serves_the_model_under_its_name_with_the_engine_args_last(tmp_path) -> None:
    checkpoint = tmp_path / "SmolLM2-135M"
    checkpoint.mkdir()
    model, served = checkpoint_model(str(checkpoint))
    assert (model, served) == (str(checkpoint), "SmolLM2-135M")
    assert checkpoint_model("Qwen/Qwen2.5-0.5B-Instruct") == ("Qwen/Qwen2.5-0.5B-Instruct",) * 2
    command = sglang_engine(model, {"python": "/envs/sglang/bin/python", "mem-fraction-static": "0.8",
                                    "enable-metrics": "true"}, 30000).command
    assert command == ["/envs/sglang/bin/python", "-m", "sglang.launch_server", "--model-path", str(checkpoint),
                       "--served-model-name", "SmolLM2-135M", "--host", "127.0.0.1", "--port", "30000",
                       "--mem-fraction-static", "0.8", "--enable-metrics"]


def test_engine_python_is_the_arg_then_the_engine_variable_then_this_interpreter(monkeypatch) -> None:
    monkeypatch.delenv(SGLANG_PYTHON_ENV, raising=False)
    assert engine_python({}, SGLANG_PYTHON_ENV) == sys.executable
    monkeypatch.setenv(SGLANG_PYTHON_ENV, "/envs/sglang/bin/python")
    assert engine_python({}, SGLANG_PYTHON_ENV) == "/envs/sglang/bin/python"
    args = {"python": "/other/python", "tp": "2"}
    assert engine_python(args, SGLANG_PYTHON_ENV) == "/other/python"
    assert args == {"tp": "2"}, "`python` is the launcher's, never passed on to the engine"


def test_ollama_settings_become_its_environment_variables() -> None:
    args = {"parallel": "4", "max-loaded-models": "1", "keep-alive": "10m", "context-length": "8192",
            "models": "/data/ollama", "binary": "/opt/ollama/bin/ollama"}
    engine = ollama_engine("tiny", args, 11500)
    command, env = engine.command, engine.env
    assert command == ["/opt/ollama/bin/ollama", "serve"]
    assert env == {"OLLAMA_HOST": "127.0.0.1:11500", "OLLAMA_NUM_PARALLEL": "4", "OLLAMA_MAX_LOADED_MODELS": "1",
                   "OLLAMA_KEEP_ALIVE": "10m", "OLLAMA_CONTEXT_LENGTH": "8192", "OLLAMA_MODELS": "/data/ollama"}


def test_ollama_keeps_the_users_model_directory_unless_told(standin_ollama) -> None:
    engine = ollama_engine("tiny", {}, 11500)
    command, env = engine.command, engine.env
    assert Path(command[0]).name == "ollama" and command[1:] == ["serve"]
    assert env == {"OLLAMA_HOST": "127.0.0.1:11500"}


def test_unknown_ollama_args_are_refused_naming_the_accepted_ones() -> None:
    with pytest.raises(EngineStartError) as error:
        ollama_engine("tiny", {"max-num-seqs": "64", "parallel": "2"}, 11500)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("--engine-arg max-num-seqs: not understood by ollama")
    for key in ("binary", "context-length", "keep-alive", "max-loaded-models", "models", "parallel"):
        assert key in message


def test_ollama_without_a_model_asks_for_one(tmp_path) -> None:
    launcher = make_launcher(EngineFile(engine="ollama"))
    with pytest.raises(EngineStartError, match=r"^--engine ollama needs --model, an Ollama model name such as"):
        with launcher(tmp_path):
            pass
    assert not (tmp_path / "engine.log").exists(), "nothing was started"


def test_no_ollama_binary_is_named_in_the_error_and_the_availability(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EngineStartError, match="no `ollama` binary on PATH"):
        ollama_engine("tiny", {}, 11500)
    available = _ollama_availability()
    assert (available.name, available.can_run) == ("ollama", False)
    assert available.detail == "no `ollama` binary on PATH (install from ollama.com)"


def test_sglang_missing_from_its_interpreter_is_reported_with_how_to_install(monkeypatch) -> None:
    monkeypatch.setenv(SGLANG_PYTHON_ENV, sys.executable)  # this environment has no sglang
    available = _sglang_availability()
    assert (available.name, available.can_run) == ("sglang", False)
    assert f"sglang is not installed for {sys.executable}" in available.detail
    assert "pip install" in available.detail and f"${SGLANG_PYTHON_ENV}" in available.detail


# --- lifecycles against the stand-in ---------------------------------------------------------------------


def test_ollama_serves_a_pulled_model_and_is_gone_afterwards(tmp_path, standin_ollama) -> None:
    run_dir = tmp_path / "run"
    with launch_local(ollama_engine, run_dir, "tiny", {"parallel": "2", "keep-alive": "1m"},
                      ready_timeout_s=READY_TIMEOUT_S) as (endpoint, info):
        pid = info.details["pid"]
        assert is_running(pid)
        assert endpoint.model == info.model == "tiny:latest"  # `tiny` stands for `tiny:latest`
        assert info.version == standin_engine.VERSION
        listed = httpx.get(endpoint.base_url + "/models", timeout=10).json()["data"]
        assert [entry["id"] for entry in listed] == ["tiny:latest"]
        record = one_chat_request(endpoint)
        assert record.ok, record.error_message
        assert record.output_tokens == 5
    assert not is_running(pid)
    assert (run_dir / "engine.log").is_file()
    started = json.loads(standin_ollama.read_text())
    port = endpoint.base_url.removeprefix("http://127.0.0.1:").removesuffix("/v1")
    assert started["pid"] == pid and started["argv"] == ["serve"]
    assert started["env"] == {"OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_NUM_PARALLEL": "2",
                              "OLLAMA_KEEP_ALIVE": "1m"}


def test_ollama_model_not_pulled_is_an_error_listing_what_it_has_and_stops_it(tmp_path, standin_ollama) -> None:
    with pytest.raises(EngineStartError) as error:
        with launch_local(ollama_engine, tmp_path / "run", "absent", ready_timeout_s=READY_TIMEOUT_S):
            pytest.fail("an engine without the model must not be yielded")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("--model absent:") and "tiny:latest" in message
    assert "ollama pull absent" in message
    assert not is_running(json.loads(standin_ollama.read_text())["pid"])


def test_sglang_gets_its_command_line_and_reports_its_version(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(SGLANG_PYTHON_ENV, raising=False)
    python, record = standin_executable(tmp_path / "sglang-env" / "bin", "python", "sglang")
    checkpoint = tmp_path / "SmolLM2-135M"
    checkpoint.mkdir()
    args = {"python": str(python), "mem-fraction-static": "0.5", "enable-metrics": "true"}
    with launch_local(sglang_engine, tmp_path / "run", str(checkpoint), args,
                      ready_timeout_s=READY_TIMEOUT_S) as (endpoint, info):
        pid = info.details["pid"]
        assert endpoint.model == info.model == "SmolLM2-135M"
        assert info.version == standin_engine.VERSION  # from /get_server_info, as SGLang before /server_info
        assert info.details["python"] == str(python)
        assert one_chat_request(endpoint).ok
    assert not is_running(pid)
    port = endpoint.base_url.removeprefix("http://127.0.0.1:").removesuffix("/v1")
    started = json.loads(record.read_text())
    assert started["argv"] == ["-m", "sglang.launch_server", "--model-path", str(checkpoint),
                               "--served-model-name", "SmolLM2-135M", "--host", "127.0.0.1", "--port", port,
                               "--mem-fraction-static", "0.5", "--enable-metrics"]
    assert (tmp_path / "run" / "engine.log").is_file()
