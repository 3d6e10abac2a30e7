"""TensorRT-LLM in its own container, built ahead of time and then served, the two steps apart.

TensorRT-LLM's TensorRT backend compiles an engine for one model, dtype, quantization, tensor-parallel
size, batch and sequence limits, image and GPU model; that build takes minutes and is the price of its
lower latency, so it is measured and cached on its own:

- the build runs the LLM API (`LLM(...).save(dir)`) in a one-shot container of the same image, into a
  folder under `$BENCH_TRTLLM_ENGINES` (default `~/.cache/bench/trtllm-engines`) named by a key of
  everything the engine depends on; it is written under a temporary name and renamed once complete, so a
  build that fails or is interrupted is never taken for a built engine;
- serving is `trtllm-serve <engine dir> --tokenizer <model> --backend tensorrt`, with the runtime flags;
- run.json keeps the build's seconds (or that the engine came from the cache) apart from time-to-ready.

`--engine-arg backend=pytorch` serves the checkpoint directly instead (TensorRT-LLM's PyTorch backend):
nothing is built.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engines.docker import (
    CONTAINER_ARGS,
    TRTLLM_IMAGE,
    ContainerOptions,
    ContainerSpec,
    launch_container,
    run_to_completion,
    trtllm_spec,
)
from engines.launch import EngineStartError
from engines.types import Endpoint, EngineInfo

if TYPE_CHECKING:
    from docker import DockerClient

ENGINES_ENV = "BENCH_TRTLLM_ENGINES"
ENGINES_IN_CONTAINER = "/engines"
BUILD_RECORD = "build.json"
IMAGE = TRTLLM_IMAGE  # a pinned release: a built engine is tied to the image that built it
BUILD_ARGS = ("dtype", "max_num_tokens", "backend")  # engine args for the build (and the choice of it)

# Runs inside the image: the LLM API's TensorRT backend builds the engine and saves it.
BUILD_SCRIPT = """\
import json, sys
a = json.loads(sys.argv[1])
try:
    from tensorrt_llm._tensorrt_engine import LLM  # 1.x: the TensorRT backend's LLM
except ImportError:
    from tensorrt_llm import LLM
from tensorrt_llm.llmapi import BuildConfig, QuantAlgo, QuantConfig
limits = {k: a[k] for k in ("max_batch_size", "max_seq_len", "max_num_tokens") if a[k] is not None}
kwargs = {"model": a["model"], "tensor_parallel_size": a["tp"], "dtype": a["dtype"],
          "build_config": BuildConfig(**limits)}
if a["quantization"]:
    kwargs["quant_config"] = QuantConfig(quant_algo=QuantAlgo[a["quantization"].upper()])
llm = LLM(**kwargs)
llm.save(a["output_dir"])
llm.shutdown()
"""


@dataclass(frozen=True)
class BuildKey:
    """Everything a built engine depends on: a change in any of them is another engine."""

    model: str
    dtype: str
    quantization: str | None
    tp: int
    max_batch_size: int | None
    max_seq_len: int | None
    max_num_tokens: int | None
    image: str
    gpu: str  # the GPU model: an engine is compiled for one architecture

    def name(self) -> str:
        """Readable and unique: `<model>-<dtype>-<quant>-tp<N>-b<batch>-s<seq>-<hash>`."""
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]
        model = re.sub(r"[^A-Za-z0-9._-]+", "_", self.model.rstrip("/").rsplit("/", 1)[-1])
        parts = [model, self.dtype, self.quantization or "noquant", f"tp{self.tp}",
                 f"b{self.max_batch_size or 'default'}", f"s{self.max_seq_len or 'default'}", digest]
        return "-".join(parts)


@dataclass(frozen=True)
class Built:
    """A built engine on this machine, and whether this launch built it or found it."""

    key: BuildKey
    engine_dir: Path
    build_s: float | None  # None: found in the cache
    built_at: str

    def details(self) -> dict[str, Any]:
        return {"key": asdict(self.key), "engine_dir": str(self.engine_dir), "cached": self.build_s is None,
                "build_s": None if self.build_s is None else round(self.build_s, 1), "built_at": self.built_at}


def engines_dir() -> Path:
    path = Path(os.environ.get(ENGINES_ENV) or Path.home() / ".cache" / "bench" / "trtllm-engines")
    path.mkdir(parents=True, exist_ok=True)
    return path


def gpu_model() -> str:
    """The first GPU's name from nvidia-smi, or `unknown` where it does not answer (the key says so)."""
    if shutil.which("nvidia-smi") is None:
        return "unknown"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.strip().splitlines()[0].strip() if out.strip() else "unknown"


def build_key(o: ContainerOptions, gpu: str | None = None) -> BuildKey:
    num_tokens = o.extra_args.get("max_num_tokens")
    return BuildKey(model=o.model, dtype=o.extra_args.get("dtype", "auto"), quantization=o.quantization,
                    tp=o.tensor_parallel_size, max_batch_size=o.max_num_seqs, max_seq_len=o.max_model_len,
                    max_num_tokens=int(num_tokens) if num_tokens is not None else None,
                    image=o.image or IMAGE, gpu=gpu or gpu_model())


def find_built(key: BuildKey, root: Path | None = None) -> Built | None:
    """The engine already built for `key`, if its build finished (its record is written last)."""
    folder = (root or engines_dir()) / key.name()
    record = folder / BUILD_RECORD
    if not record.is_file():
        return None
    saved = json.loads(record.read_text())
    return Built(key, folder, None, saved.get("built_at", ""))


def build_spec(o: ContainerOptions, key: BuildKey, output_name: str) -> ContainerSpec:
    args = {"model": key.model, "dtype": key.dtype, "quantization": key.quantization, "tp": key.tp,
            "max_batch_size": key.max_batch_size, "max_seq_len": key.max_seq_len,
            "max_num_tokens": key.max_num_tokens, "output_dir": f"{ENGINES_IN_CONTAINER}/{output_name}"}
    container = {k: v for k, v in o.extra_args.items() if k in CONTAINER_ARGS}  # shared memory, cache: as served
    base = trtllm_spec(replace(o, quantization=None, extra_args=container))
    return replace(base, engine="trtllm-build", command=["python3", "-c", BUILD_SCRIPT, json.dumps(args)],
                   volumes={**base.volumes, str(engines_dir()): ENGINES_IN_CONTAINER})


def ensure_built(run_dir: Path, o: ContainerOptions, key: BuildKey, client: DockerClient | None = None) -> Built:
    """The engine for `key`: found in the cache, or built now in a one-shot container (its log in
    engine.log, its seconds recorded)."""
    found = find_built(key)
    if found is not None:
        return found
    root = engines_dir()
    partial = f"{key.name()}.partial-{uuid.uuid4().hex[:8]}"
    try:
        build_s = run_to_completion(run_dir, build_spec(o, key, partial), o.ready_timeout_s, client)
        if not (root / partial / "config.json").is_file():
            raise EngineStartError(f"trtllm build finished but wrote no engine (no config.json in {root / partial})")
        built_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record = {"key": asdict(key), "build_s": round(build_s, 1), "built_at": built_at}
        (root / partial / BUILD_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        try:
            (root / partial).rename(root / key.name())
        except OSError:  # another command finished the same build first: keep that one
            return find_built(key) or Built(key, root / key.name(), build_s, built_at)
        return Built(key, root / key.name(), build_s, built_at)
    finally:
        shutil.rmtree(root / partial, ignore_errors=True)


def serve_spec(o: ContainerOptions, built: Built) -> ContainerSpec:
    """`trtllm-serve` on the built engine; it lists the model by the engine folder's name."""
    runtime = {k: v for k, v in o.extra_args.items() if k not in BUILD_ARGS}
    base = trtllm_spec(replace(o, quantization=None, max_model_len=None, extra_args=runtime))
    inside = f"{ENGINES_IN_CONTAINER}/{built.engine_dir.name}"
    flags = base.command[2:]  # trtllm-serve MODEL, then its flags
    return replace(base, command=["trtllm-serve", inside, "--tokenizer", o.model, "--backend", "tensorrt", *flags],
                   served_model=built.engine_dir.name,
                   volumes={**base.volumes, str(built.engine_dir): f"{inside}:ro"})


def check_options(o: ContainerOptions) -> str:
    """The backend asked for (tensorrt unless backend=pytorch), and the options checked for it."""
    backend = o.extra_args.get("backend", "tensorrt")
    if backend not in ("tensorrt", "pytorch"):
        raise EngineStartError(f"--engine-arg backend={backend}: trtllm-docker takes backend=tensorrt (built "
                               "ahead of time, the default) or backend=pytorch (served directly, no build)")
    if backend == "pytorch":
        trtllm_spec(o)  # raises on what serving alone cannot do
    return backend


@contextmanager
def launch_trtllm(run_dir: Path, o: ContainerOptions, port: int | None = None,
                  client: DockerClient | None = None) -> Iterator[tuple[Endpoint, EngineInfo]]:
    """Build (or find) the engine, then serve it; run.json's details get the build apart from time-to-ready."""
    if check_options(o) == "pytorch":
        with launch_container(run_dir, trtllm_spec(o), port, client) as running:
            yield running
        return
    key = build_key(o)
    built = ensure_built(run_dir, o, key, client)
    with launch_container(run_dir, serve_spec(o, built), port, client) as (endpoint, info):
        yield endpoint, replace(info, details={**info.details, "build": built.details()})
