"""Engines launched as local processes on a free local port: the reference engine (always a child process,
never inside the load generator's interpreter), llama.cpp's server (a `llama-server` binary, or the one
embedded in the `xllamacpp` package), vLLM's and SGLang's OpenAI servers, and `ollama serve`.

Each kind is a function from its model, flags and port to a `LocalEngine`: the command line it runs (built
there, in the kind), what answers when it is ready, how it names its model and version, what run.json keeps
of it. `launch_local` does the rest for all of them (port, process lifecycle, endpoint), so a kind knows
nothing of processes or ports; `launch_local(vllm_engine, run_dir, model)` launches one from Python, and a
kind's registry entry (`engines.registry.LocalProcess`) does the same: entry, `launch_local`, kind.

`--engine-arg key=value` flags pass through to the engine as `--key value` (`--key` alone for `true`);
`ollama serve` takes no flags, so its few settings become environment variables instead.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from common.secrets import redact, redact_argv
from engines.convert import default_gguf, default_safetensors_checkpoint
from engines.keys import KEY_VARIABLES, key_in_environment
from engines.launch import ENGINE_LOG, EngineStartError, ProcessSpec, local_port, run_process, server_version
from engines.types import Endpoint, EngineInfo, RunningEngine


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


def listed_model(root: str, headers: dict[str, str]) -> str:
    """The first model the server lists at /v1/models (asked with `headers`, its key): the name it serves
    the model under."""
    response = httpx.get(root + "/v1/models", headers=headers, timeout=10)
    if response.status_code in (401, 403):
        raise EngineStartError(f"{root}/v1/models refused bench's own request (HTTP {response.status_code}): the "
                               "engine wants an API key bench was not given (REFERENCE_API_KEY or VLLM_API_KEY set in "
                               "this environment for another server?)")
    return str(response.json()["data"][0]["id"])


@dataclass(frozen=True)
class LocalEngine:
    """One kind of engine, its model and flags resolved, on one port: all that differs between kinds."""

    name: str
    command: list[str]
    version: Callable[[str], str | None]  # asked of the ready server, given its root URL
    details: dict[str, Any]  # for run.json, after the command; time_to_ready_s and pid are added
    served_model: Callable[[str, dict[str, str]], str] = listed_model  # asked of the ready server: root URL, headers
    env: dict[str, str] = field(default_factory=dict)
    ready_paths: tuple[str, ...] = ("/health",)  # any one answering 200 means ready


# (model, engine args, port) -> the engine to run; a bad model or flag raises EngineStartError, nothing started.
LocalKind = Callable[[str, dict[str, str], int], LocalEngine]


@contextmanager
def launch_local(
    kind: LocalKind, run_dir: Path, model: str = "default", args: dict[str, str] | None = None, port: int | None = None,
    ready_timeout_s: float = 600.0, env: dict[str, str] | None = None, cpus: tuple[int, ...] | None = None,
    extra_argv: list[str] | None = None, api_key: str | None = None,
) -> Iterator[tuple[Endpoint, EngineInfo]]:
    """Run the engine `kind` makes on `port` (or a free one) until ready, yield its endpoint and what runs
    there, and stop it on every path; `env` is added to its environment (its secrets travel there, never on
    its command line: `engines.keys`), `cpus` the cores it is pinned to, `extra_argv` to its command line
    (flags that take several values: its LoRA adapters); `api_key`, the key its server wants, is sent by
    bench's own checks and named (never written) in the endpoint."""
    port, root = local_port(port)
    engine = kind(model, dict(args or {}), port)  # a copy: kinds take the launcher's own keys out
    if extra_argv:
        engine = replace(engine, command=[*engine.command, *extra_argv])
    urls = [root + path for path in engine.ready_paths]
    spec = ProcessSpec(engine.name, engine.command, urls, env={**engine.env, **(env or {})},
                       ready_timeout_s=ready_timeout_s, cpus=cpus)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with run_process(spec, run_dir / ENGINE_LOG) as started, key_in_environment(api_key) as key_variable:
        served = engine.served_model(root, headers)
        details = {"command": redact_argv(engine.command), **redact(engine.details),
                   "time_to_ready_s": round(started.time_to_ready_s, 3), "pid": started.pid}
        info = EngineInfo(name=engine.name, model=served, version=engine.version(root), launched_by="bench",
                          details=details)
        yield Endpoint(root + "/v1", served, key_variable), info


REFERENCE_KEY_VARIABLE = KEY_VARIABLES["reference"]["api-key"]


# --- the reference engine --------------------------------------------------------------------------------


def reference_engine(model: str, args: dict[str, str], port: int) -> LocalEngine:
    """`python -m engines.reference` with the model and flags given."""
    command = [sys.executable, "-m", "engines.reference", "--model", model, "--host", "127.0.0.1", "--port", str(port),
               *engine_arg_flags(args)]
    return LocalEngine("reference", command, version=lambda root: _tool_version(),
                       details={"model_argument": model, "engine_args": args})


def launch_reference_argv(run_dir: Path, argv: list[str], ready_timeout_s: float = 600.0, port: int | None = None,
                          env: dict[str, str] | None = None, cpus: tuple[int, ...] | None = None,
                          api_key: str | None = None) -> RunningEngine:
    """The reference engine with its own server flags as given (`bench serve`'s), on `port` (or a free one);
    `api_key`, when it wants one, reaches it in its environment (never among `argv`)."""
    env = {**(env or {}), REFERENCE_KEY_VARIABLE: api_key} if api_key else env

    def kind(model: str, args: dict[str, str], port: int) -> LocalEngine:
        command = [sys.executable, "-m", "engines.reference", *argv, "--host", "127.0.0.1", "--port", str(port)]
        return LocalEngine("reference", command, version=lambda root: _tool_version(), details={"argv": argv})

    return launch_local(kind, run_dir, "from-argv", None, port, ready_timeout_s, env, cpus, api_key=api_key)


# --- llama.cpp -------------------------------------------------------------------------------------------

LLAMACPP_RUNNER_ARGS = {"parallel", "ctx-per-slot", "threads", "batch-size", "ubatch-size", "alias"}




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


def llamacpp_engine(model: str, args: dict[str, str], port: int) -> LocalEngine:
    """llama.cpp's server on a .gguf file (`default`: SmolLM2-135M-Instruct): a `llama-server` binary when one
    is on PATH (what users have), else the server inside xllamacpp; `binary` in run.json says which ran."""
    model_path = default_gguf() if model == "default" else Path(model)
    if not model_path.is_file() or model_path.suffix != ".gguf":
        raise EngineStartError(f"--model {model}: llama.cpp needs a .gguf file")
    flags = {"parallel": "32", "ctx-per-slot": "2048", **args}
    binary = shutil.which("llama-server")
    if binary:
        parallel, per_slot = int(flags.pop("parallel")), int(flags.pop("ctx-per-slot"))
        command = [binary, "--model", str(model_path), "--host", "127.0.0.1", "--port", str(port), "--parallel",
                   str(parallel), "--ctx-size", str(parallel * per_slot), "--metrics", *engine_arg_flags(flags)]
        source = binary
    else:
        unknown = sorted(set(flags) - LLAMACPP_RUNNER_ARGS)
        if unknown:
            raise EngineStartError(f"--engine-arg {', '.join(unknown)}: not understood by the embedded llama.cpp "
                                   f"server; it takes {', '.join(sorted(LLAMACPP_RUNNER_ARGS))}")
        command = [sys.executable, "-m", "engines.llamacpp_runner", "--model", str(model_path), "--port", str(port),
                   *engine_arg_flags(flags)]
        source = "xllamacpp " + _package_version("xllamacpp")
    return LocalEngine("llamacpp", command, version=lambda root: llamacpp_version(root, source),
                       details={"binary": source, "model_path": str(model_path), "engine_args": args})


# --- vLLM and SGLang -------------------------------------------------------------------------------------

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
        model = str(default_safetensors_checkpoint())
    return model, Path(model).name if Path(model).exists() else model


def vllm_engine(model: str, args: dict[str, str], port: int) -> LocalEngine:
    """vLLM's OpenAI server as a local process (e.g. the CPU build), in its own interpreter, serving a
    checkpoint under the name `checkpoint_model` gives it."""
    if shutil.which("nvidia-smi") is None:
        # The CPU build reads --gpu-memory-utilization as the share of RAM for its KV cache; its default
        # (0.9) leaves too little for anything else on the machine, the load generator included.
        args.setdefault("gpu-memory-utilization", VLLM_CPU_MEMORY_SHARE)
    python = engine_python(args, VLLM_PYTHON_ENV)
    model, served = checkpoint_model(model)
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name", served,
               "--host", "127.0.0.1", "--port", str(port), *engine_arg_flags(args)]
    return LocalEngine("vllm", command, served_model=lambda root, headers: served,
                       version=lambda root: server_version(root, "/version"),
                       details={"engine_args": args, "python": python})


def sglang_engine(model: str, args: dict[str, str], port: int) -> LocalEngine:
    """SGLang's OpenAI server (`python -m sglang.launch_server`) as a local process, in its own interpreter,
    serving a checkpoint under the name `checkpoint_model` gives it."""
    python = engine_python(args, SGLANG_PYTHON_ENV)
    model, served = checkpoint_model(model)
    command = [python, "-m", "sglang.launch_server", "--model-path", model, "--served-model-name", served,
               "--host", "127.0.0.1", "--port", str(port), *engine_arg_flags(args)]
    # `/server_info` is `/get_server_info` before SGLang renamed it.
    return LocalEngine("sglang", command, served_model=lambda root, headers: served,
                       version=lambda root: server_version(root, "/server_info", "/get_server_info"),
                       details={"engine_args": args, "python": python})


# --- Ollama ----------------------------------------------------------------------------------------------

# `ollama serve` takes no flags: it is configured through its environment.
OLLAMA_ENV = {"parallel": "OLLAMA_NUM_PARALLEL", "max-loaded-models": "OLLAMA_MAX_LOADED_MODELS",
              "keep-alive": "OLLAMA_KEEP_ALIVE", "context-length": "OLLAMA_CONTEXT_LENGTH", "models": "OLLAMA_MODELS"}


def ollama_engine(model: str, args: dict[str, str], port: int) -> LocalEngine:
    """`ollama serve` as a local process, its OpenAI API under /v1, serving an Ollama model already pulled
    (nothing is downloaded); ready when /api/version answers. Its settings are environment variables that
    make it listen on 127.0.0.1:PORT (`models`, the model directory, only when given: else the user's
    ~/.ollama/models)."""
    if model == "default":
        raise EngineStartError("--engine ollama needs --model, an Ollama model name such as llama3.2:1b")
    settings = dict(args)
    binary = settings.pop("binary", None)
    unknown = sorted(set(settings) - set(OLLAMA_ENV))
    if unknown:
        raise EngineStartError(f"--engine-arg {', '.join(unknown)}: not understood by ollama; it takes "
                               f"{', '.join(sorted([*OLLAMA_ENV, 'binary']))}")
    binary = binary or shutil.which("ollama")
    if not binary:
        raise EngineStartError("no `ollama` binary on PATH (install it from ollama.com, or --engine-arg binary=PATH)")
    command = [binary, "serve"]
    env = {"OLLAMA_HOST": f"127.0.0.1:{port}", **{OLLAMA_ENV[key]: value for key, value in settings.items()}}
    models_dir = env.get("OLLAMA_MODELS", "~/.ollama/models")
    return LocalEngine("ollama", command, env=env, ready_paths=("/api/version",),
                       served_model=lambda root, headers: _pulled_ollama_model(root, model, models_dir),
                       version=lambda root: server_version(root, "/api/version"),
                       details={"env": env, "model_argument": model, "engine_args": args})


def _pulled_ollama_model(root: str, model: str, models_dir: str) -> str:
    """The name Ollama lists for `model` (`NAME` stands for `NAME:latest`), or an error naming what it has."""
    listed = httpx.get(root + "/api/tags", timeout=10).json().get("models") or []
    names = [str(entry.get("name")) for entry in listed]
    for name in (model, f"{model}:latest"):
        if name in names:
            return name
    raise EngineStartError(f"--model {model}: not among the models Ollama has in {models_dir} "
                           f"({', '.join(names) or 'none'}); run `ollama pull {model}` first")


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _tool_version() -> str:
    return _package_version("llm-selfhost-bench")
