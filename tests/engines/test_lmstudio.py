"""LM Studio through `lms` (a stand-in speaking its CLI and API): started, loaded, measured, and undone on
every path, with one-line errors for what is missing."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import httpx
import pytest

from engines.launch import EngineStartError
from engines.lmstudio import launch_lmstudio
from tests.engines import standin_lms
from tests.servers import is_running


@pytest.fixture
def lms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`lms` on PATH is the stand-in; the state file it keeps is returned."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "lms"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {standin_lms.__file__} \"$@\"\n")
    script.chmod(0o755)
    state = tmp_path / "lms-state.json"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_LMS_STATE", str(state))
    return state


def test_a_downloaded_model_is_served_and_everything_is_undone_afterwards(lms: Path, tmp_path: Path) -> None:
    with launch_lmstudio(tmp_path, "qwen2.5-0.5b-instruct", {"context-length": "4096"}) as (endpoint, info):
        assert endpoint.model == "qwen2.5-0.5b-instruct" and info.name == "lmstudio"
        assert info.version == standin_lms.VERSION_TEXT and info.launched_by == "bench"
        listed = httpx.get(endpoint.base_url + "/models", timeout=5).json()["data"]
        assert [m["id"] for m in listed] == ["qwen2.5-0.5b-instruct"]
        pid = json.loads(lms.read_text())["server"]["pid"]
    commands = json.loads(lms.read_text())["commands"]
    assert ["load", "qwen2.5-0.5b-instruct", "--context-length", "4096"] in commands
    assert commands[-2:] == [["unload", "--all"], ["server", "stop"]]
    deadline = time.monotonic() + 10
    while is_running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not is_running(pid)
    assert "$ lms server start --port" in (tmp_path / "engine.log").read_text()


def test_the_server_is_stopped_when_the_block_fails(lms: Path, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), launch_lmstudio(tmp_path, "llama-3.2-1b-instruct"):
        raise RuntimeError("the sweep failed")
    assert json.loads(lms.read_text())["commands"][-1] == ["server", "stop"]


def test_a_model_not_downloaded_is_one_line_naming_what_lms_ls_has(lms: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineStartError) as error, launch_lmstudio(tmp_path, "mistral-7b"):
        pass
    message = str(error.value)
    assert "qwen2.5-0.5b-instruct, llama-3.2-1b-instruct" in message and "lms get mistral-7b" in message
    assert "\n" not in message
    assert not any(c[:2] == ["server", "start"] for c in json.loads(lms.read_text())["commands"])


def test_no_lms_and_an_unknown_flag_are_one_line_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EngineStartError, match="no `lms` on PATH"), launch_lmstudio(tmp_path, "m"):
        pass
    with pytest.raises(EngineStartError, match="--engine-arg turbo: not understood by lmstudio"), \
            launch_lmstudio(tmp_path, "m", {"turbo": "true"}):
        pass


def test_a_sweep_measures_lmstudio_and_records_what_ran(lms: Path, tmp_path: Path) -> None:
    from tests.bench.test_cli import bench, only_run_dir

    result = bench("sweep", "--engine", "lmstudio", "--model", "llama-3.2-1b-instruct", "--concurrency", "2",
                   "--requests", "4", "--output-tokens", "4", "--no-report", "--out", str(tmp_path / "runs"),
                   env={"PATH": os.environ["PATH"], "STANDIN_LMS_STATE": str(lms)}, timeout=120)
    assert result.returncode == 0, result.stderr
    run = json.loads((only_run_dir(tmp_path / "runs") / "run.json").read_text())
    assert run["engine"]["name"] == "lmstudio" and run["engine"]["model"] == "llama-3.2-1b-instruct"
    summary = json.loads((only_run_dir(tmp_path / "runs") / "summary.json").read_text())
    assert summary[0]["num_ok"] == 4
    assert json.loads(lms.read_text())["commands"][-1] == ["server", "stop"]
