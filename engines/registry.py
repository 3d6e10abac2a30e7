"""The engine kinds `bench` can measure: a plain dict from name to a function that makes a launcher.

A launcher is a context manager yielding (Endpoint, EngineInfo); it stops whatever it started.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
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


def make_launcher(kind: str, **options: Any) -> Launcher:
    if kind not in ENGINES:
        raise EngineError(f"unknown --engine '{kind}'; choose one of: {', '.join(sorted(ENGINES))}")
    return ENGINES[kind](**options)
