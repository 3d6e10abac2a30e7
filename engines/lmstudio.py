"""LM Studio through its CLI, `lms`: the server started on a port of its own, a model already downloaded
loaded into it, and both undone on every path.

`lms server start --port P` hands the server to LM Studio's own background service and returns, so this
launcher does not own a process: it runs `lms` commands (their output into the run's `engine.log`), waits
for `/v1/models` to answer, and on leaving runs `lms unload --all` and `lms server stop`, however the block
is left. A model that is not downloaded is a one-line error listing what `lms ls` has; nothing is fetched.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from engines.launch import ENGINE_LOG, EngineStartError, local_port, log_tail, stop_signals_held, wait_until_ready
from engines.types import Endpoint, EngineInfo

COMMAND_TIMEOUT_S = 120.0
LMSTUDIO_ARGS = {"binary", "context-length", "gpu"}  # what `--engine-arg` may set


def find_lms(args: dict[str, str]) -> str:
    binary = args.get("binary") or shutil.which("lms")
    if not binary:
        raise EngineStartError("no `lms` on PATH: install LM Studio and run `~/.lmstudio/bin/lms bootstrap`, or pass "
                               "--engine-arg binary=PATH")
    return binary


def downloaded_models(lms: str, log: Path) -> list[str]:
    """The model keys `lms ls --json` lists."""
    listed = json.loads(_lms(lms, ["ls", "--json"], log))
    return [str(m.get("modelKey") or m.get("path")) for m in listed if isinstance(m, dict)]


@contextmanager
def launch_lmstudio(run_dir: Path, model: str = "default", args: dict[str, str] | None = None,
                    port: int | None = None, ready_timeout_s: float = 600.0) -> Iterator[tuple[Endpoint, EngineInfo]]:
    args = dict(args or {})
    unknown = sorted(set(args) - LMSTUDIO_ARGS)
    if unknown:
        raise EngineStartError(f"--engine-arg {', '.join(unknown)}: not understood by lmstudio; it takes "
                               f"{', '.join(sorted(LMSTUDIO_ARGS))}")
    if model == "default":
        raise EngineStartError("--engine lmstudio needs --model, a model LM Studio has downloaded (see `lms ls`)")
    lms = find_lms(args)
    log = run_dir / ENGINE_LOG
    version = (_lms(lms, ["version"], log).strip().splitlines() or [None])[-1]
    models = downloaded_models(lms, log)
    if model not in models:
        raise EngineStartError(f"--model {model}: LM Studio has not downloaded it (`lms ls`: "
                               f"{', '.join(models) or 'none'}); run `lms get {model}` first")
    port, root = local_port(port)
    started = time.monotonic()
    try:
        _lms(lms, ["server", "start", "--port", str(port)], log)
        wait_until_ready("LM Studio's server", [root + "/v1/models"], ready_timeout_s, started,
                         exit_code=lambda: None, log_tail=lambda: log_tail(log), log_name=str(log))
        load = ["load", model, *_load_flags(args)]
        _lms(lms, load, log)
        served = _served(root, model)
        details = {"commands": [["server", "start", "--port", str(port)], load], "binary": lms,
                   "time_to_ready_s": round(time.monotonic() - started, 3), "engine_args": args}
        yield Endpoint(root + "/v1", served), EngineInfo("lmstudio", served, version, "bench", details)
    finally:
        with stop_signals_held():
            for command in (["unload", "--all"], ["server", "stop"]):
                try:
                    _lms(lms, command, log)
                except EngineStartError:
                    pass  # the server may not have started: stopping it is then nothing to do


def _load_flags(args: dict[str, str]) -> list[str]:
    flags = []
    if "context-length" in args:
        flags += ["--context-length", args["context-length"]]
    if "gpu" in args:
        flags += ["--gpu", args["gpu"]]
    return flags


def _served(root: str, model: str) -> str:
    """The identifier LM Studio serves the model under (the model key itself unless it says otherwise)."""
    listed = [str(m["id"]) for m in httpx.get(root + "/v1/models", timeout=10).json().get("data", [])]
    return model if model in listed or not listed else next((m for m in listed if model in m), listed[0])


def _lms(lms: str, args: list[str], log: Path) -> str:
    """Run `lms ARGS`, its output appended to the log; a failure is an error naming the command."""
    try:
        done = subprocess.run([lms, *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineStartError(f"`lms {' '.join(args)}` did not run: {exc}") from None
    with log.open("a") as f:
        f.write(f"$ lms {' '.join(args)}\n{done.stdout}{done.stderr}")
    if done.returncode != 0:
        raise EngineStartError(f"`lms {' '.join(args)}` failed (exit {done.returncode}): "
                               f"{(done.stderr or done.stdout).strip()[-300:]}")
    return done.stdout
