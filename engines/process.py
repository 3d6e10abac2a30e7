"""Engines launched as local processes. The reference engine always runs as a child process (never inside
the load generator's process, so the two never compete for one interpreter), on a free local port.

`--engine-arg key=value` flags pass through to the engine as `--key value` (`--key` alone for `true`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from engines.launch import ProcessSpec, check_port_free, free_port, run_process
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
    if port is not None:
        check_port_free(port)
    port = port or free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    command = reference_command(model, port, args)
    spec = ProcessSpec("reference", command, [base_url.removesuffix("/v1") + "/health"],
                       ready_timeout_s=ready_timeout_s)
    with run_process(spec, run_dir / ENGINE_LOG) as started:
        served = _served_model(base_url)
        info = EngineInfo(
            name="reference", model=served, version=_tool_version(), launched_by="bench",
            details={"command": command, "model_argument": model, "engine_args": args,
                     "time_to_ready_s": round(started.time_to_ready_s, 3), "pid": started.pid},
        )
        yield Endpoint(base_url, served), info


def _served_model(base_url: str) -> str:
    models = httpx.get(base_url + "/models", timeout=10).json()["data"]
    return str(models[0]["id"])


def _tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llm-selfhost-bench")
    except PackageNotFoundError:
        return "unknown"
