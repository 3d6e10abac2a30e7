"""Engines in containers, through the Docker API (Docker, or podman serving the same API).

Each engine kind maps our options (model, tensor parallel size, concurrent sequences, memory fraction,
quantization, context length, extra engine args) to that engine's own flags, on a pinned release of its
image (never `:latest`; the digest pulled is recorded too). Every container publishes its port on 127.0.0.1
only, on a host port the container runtime picks and holds from the start (so no other process can take it
between a choice and a bind; `--port` asks for one, refused at once if taken), mounts the Hugging Face cache
(read-only unless the model must be downloaded: `engines.hf_cache`), gets `HF_TOKEN` from the environment
(its value is never written to any file of ours), is labelled with the host that started it (for
`bench clean`), and is stopped and removed on every path.

Shared memory: vLLM, SGLang and TensorRT-LLM get a private `/dev/shm` of `--shm-size` (16g, SGLang 32g)
instead of the host's IPC namespace, which would let the container reach every shared-memory segment of the
host. Three `--engine-arg`s (or an engine file's `args`) are the container's, not the engine's:
`ipc=host` (the host's IPC namespace, as the engines' own docs show, where a multi-GPU engine needs it),
`shm-size=64g`, and `hf-cache=ro|rw`.

Readiness and the version probe are `engines.launch`'s, shared with local processes; this module adds only
what the Docker API needs.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from engines import lifeline, ports
from engines.hf_cache import OFFLINE_ENV, CacheMount, cache_mount
from engines.launch import (
    ENGINE_LOG,
    LOG_TAIL_LINES,
    EngineStartError,
    check_port_free,
    server_version,
    stop_signals_held,
    wait_until_ready,
)
from engines.process import engine_arg_flags
from engines.types import Endpoint, EngineInfo

if TYPE_CHECKING:  # the docker SDK is an optional extra, imported where a container is run
    from docker import DockerClient
    from docker.models.containers import Container
    from docker.models.images import Image

HF_CACHE_IN_CONTAINER = "/root/.cache/huggingface"
# Each engine's newest stable release when pinned (vLLM and SGLang as on PyPI; TensorRT-LLM's NGC release
# container, whose newer tags are release candidates). Change with `image:` in an engine file.
VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"
SGLANG_IMAGE = "lmsysorg/sglang:v0.5.23"
TRTLLM_IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:1.2.1"
SHM_SIZE = "16g"  # /dev/shm for the engine's worker processes, in place of the host's IPC namespace
CONTAINER_ARGS = ("ipc", "shm-size", "hf-cache")  # --engine-args that shape the container, not the engine


@dataclass(frozen=True)
class ContainerOptions:
    """Our options for a containerized engine; each engine kind maps them to its own flags."""

    model: str
    gpus: str | list[int] | None = "all"  # "all", chosen device indices, or None for no GPU
    tensor_parallel_size: int = 1
    max_num_seqs: int | None = None
    gpu_memory_fraction: float | None = None
    quantization: str | None = None
    max_model_len: int | None = None
    extra_args: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    ready_timeout_s: float = 1800.0  # a first start may download weights and compile kernels
    env: dict[str, str] = field(default_factory=dict)  # more environment (e.g. a mirror's address)
    volumes: dict[str, str] = field(default_factory=dict)  # more mounts: host path -> container path[:ro]
    extra_argv: list[str] = field(default_factory=list)  # flags after the others (several values: LoRA adapters)


@dataclass(frozen=True)
class ContainerSpec:
    """Exactly what to run: the result of mapping ContainerOptions for one engine kind."""

    engine: str
    image: str
    command: list[str]
    container_port: int
    served_model: str
    health_path: str = "/health"
    version_path: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    volumes: dict[str, str] = field(default_factory=dict)  # host path -> container path
    gpus: str | list[int] | None = "all"
    shm_size: str | None = None
    ipc_host: bool = False  # the host's IPC namespace: only where asked (`ipc=host`)
    cache: CacheMount | None = None  # the Hugging Face cache as mounted, and why so (run.json)
    # An init process as PID 1 passes SIGTERM on: an engine that is PID 1 itself ignores it until it has
    # installed its own handler, so a container stopped while loading would wait out the whole stop timeout.
    init: bool = True
    working_dir: str | None = None
    ready_timeout_s: float = 1800.0


def vllm_spec(o: ContainerOptions) -> ContainerSpec:
    flags = _flags({"model": o.model, "tensor-parallel-size": o.tensor_parallel_size, "max-num-seqs": o.max_num_seqs,
                    "gpu-memory-utilization": o.gpu_memory_fraction, "quantization": o.quantization,
                    "max-model-len": o.max_model_len, "host": "0.0.0.0", "port": 8000})
    return _spec("vllm", o, VLLM_IMAGE, flags, 8000, version_path="/version", shm_size=SHM_SIZE)


def sglang_spec(o: ContainerOptions) -> ContainerSpec:
    flags = _flags({"model-path": o.model, "tp": o.tensor_parallel_size, "max-running-requests": o.max_num_seqs,
                    "mem-fraction-static": o.gpu_memory_fraction, "quantization": o.quantization,
                    "context-length": o.max_model_len, "host": "0.0.0.0", "port": 30000})
    return _spec("sglang", o, SGLANG_IMAGE, ["python3", "-m", "sglang.launch_server", *flags], 30000,
                 version_path="/get_server_info", shm_size="32g")


def trtllm_spec(o: ContainerOptions) -> ContainerSpec:
    flags = _flags({"tp_size": o.tensor_parallel_size, "max_batch_size": o.max_num_seqs,
                    "kv_cache_free_gpu_memory_fraction": o.gpu_memory_fraction, "max_seq_len": o.max_model_len,
                    "host": "0.0.0.0", "port": 8000})
    if o.quantization:
        raise EngineStartError("trtllm with backend=pytorch: quantization comes with the checkpoint, not at serve "
                               "time; give --model a quantized checkpoint, or drop backend=pytorch so that the "
                               "TensorRT build quantizes it")
    return _spec("trtllm", o, TRTLLM_IMAGE, ["trtllm-serve", o.model, *flags], 8000, shm_size=SHM_SIZE)


def _flags(values: dict[str, object]) -> list[str]:
    return [part for key, value in values.items() if value is not None for part in (f"--{key}", str(value))]


def _spec(engine: str, o: ContainerOptions, image: str, command: list[str], port: int, shm_size: str,
          **extra: Any) -> ContainerSpec:
    engine_args = {k: v for k, v in o.extra_args.items() if k not in CONTAINER_ARGS}
    ipc = o.extra_args.get("ipc")
    if ipc not in (None, "host"):
        raise EngineStartError(f"--engine-arg ipc={ipc}: the only choice is ipc=host (the host's IPC namespace); "
                               "leave it out for a private /dev/shm of shm-size")
    if ipc == "host" and "shm-size" in o.extra_args:
        raise EngineStartError("--engine-arg shm-size sizes a private /dev/shm, and ipc=host uses the host's: "
                               "give one of them")
    try:
        cache = cache_mount(o.model, o.extra_args.get("hf-cache"))
    except ValueError as exc:
        raise EngineStartError(str(exc)) from None
    inside = HF_CACHE_IN_CONTAINER + (":ro" if cache.read_only else "")
    return ContainerSpec(
        engine=engine, image=o.image or image, command=[*command, *engine_arg_flags(engine_args), *o.extra_argv],
        container_port=port, served_model=o.model, gpus=o.gpus, ready_timeout_s=o.ready_timeout_s,
        env={**({"HF_TOKEN": os.environ["HF_TOKEN"]} if os.environ.get("HF_TOKEN") else {}),
             **(OFFLINE_ENV if cache.offline else {}), **o.env},
        volumes={cache.host_path: inside, **o.volumes}, ipc_host=ipc == "host",
        shm_size=None if ipc == "host" else o.extra_args.get("shm-size", shm_size), cache=cache, **extra,
    )


def docker_client(timeout_s: float | None = None) -> DockerClient:
    """The Docker API client (DOCKER_HOST is honoured, so podman's socket works), or a clear error. `timeout_s`
    bounds each call (the SDK's own is 60 s), so a probe of a daemon that accepts and never answers ends."""
    try:
        import docker
    except ImportError:
        raise EngineStartError("the docker package is not installed: pip install -e '.[docker]'") from None
    try:
        client = docker.from_env(**({"timeout": timeout_s} if timeout_s else {}))
        client.ping()
    except docker.errors.DockerException:
        where = os.environ.get("DOCKER_HOST", "the default socket")
        raise EngineStartError(f"no Docker daemon answers at {where}; start Docker, or serve podman's API "
                               "(`podman system service`) and set DOCKER_HOST") from None
    return client


def container_name(spec: ContainerSpec) -> str:
    return f"bench-{spec.engine}-{uuid.uuid4().hex[:8]}"


def run_kwargs(spec: ContainerSpec, host_port: int | None, name: str | None = None, run_id: str = ""
               ) -> dict[str, Any]:
    """The arguments of `containers.run` for a spec: published on 127.0.0.1 only (on `host_port`, or one the
    runtime picks), GPUs as asked, labelled with its engine, its owner, its host and its run
    (`engines.lifeline`)."""
    import docker

    kwargs: dict[str, Any] = {
        "image": spec.image, "command": spec.command, "detach": True,
        "name": name or container_name(spec), "labels": lifeline.container_labels(spec.engine, run_id),
        "ports": {f"{spec.container_port}/tcp": ("127.0.0.1", host_port) if host_port else ("127.0.0.1",)},
        "environment": dict(spec.env),
        "volumes": {host: _bind(inside) for host, inside in spec.volumes.items()},
    }
    if spec.gpus == "all":
        kwargs["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    elif spec.gpus:
        ids = [str(i) for i in spec.gpus]
        kwargs["device_requests"] = [docker.types.DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]
    if spec.init:
        kwargs["init"] = True
    if spec.ipc_host:
        kwargs["ipc_mode"] = "host"
    if spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if spec.working_dir:
        kwargs["working_dir"] = spec.working_dir
    return kwargs


def _bind(inside: str) -> dict[str, str]:
    """`/path` (read-write) or `/path:ro` (read-only) -> the Docker API's bind description."""
    path, _, mode = inside.partition(":")
    return {"bind": path, "mode": mode or "rw"}


def ensure_image(client: DockerClient, image: str, log: IO[bytes] | None = None) -> Image:
    """The image, pulled (with progress lines in the log) when it is not here yet."""
    import docker

    try:
        return client.images.get(image)
    except docker.errors.ImageNotFound:
        pass
    try:
        for event in client.api.pull(image, stream=True, decode=True):
            if log is not None and "status" in event:
                log.write(f"pull {image}: {event['status']} {event.get('progress', '')}\n".encode())
        return client.images.get(image)
    except docker.errors.DockerException as exc:
        raise EngineStartError(f"image {image} is not here and could not be pulled ({exc}); pull it yourself or "
                               "name a local image") from None


@contextmanager
def launch_container(
    run_dir: Path, spec: ContainerSpec, port: int | None = None, client: DockerClient | None = None
) -> Iterator[tuple[Endpoint, EngineInfo]]:
    """Run the container, wait until it answers, yield its endpoint; stop and remove it on every path, and
    if this process dies, the lifeline's watcher removes it."""
    client = client or docker_client()
    if port is not None:
        check_port_free(port)
    name = container_name(spec)
    with _running(run_dir, spec, run_kwargs(spec, port, name, run_dir.name), client) as (container, image,
                                                                                        started_at):
        root = f"http://127.0.0.1:{published_port(spec, container)}"
        wait_until_ready(f"{spec.engine} container", [root + spec.health_path], spec.ready_timeout_s, started_at,
                         exit_code=lambda: _exit_code(container), log_tail=lambda: _logs_tail(container),
                         log_name="its log")
        version = server_version(root, spec.version_path) if spec.version_path else None
        details = _details(spec, image, container, time.monotonic() - started_at)
        info = EngineInfo(name=spec.engine, model=spec.served_model, version=version, launched_by="bench",
                          details=details)
        yield Endpoint(root + "/v1", spec.served_model), info


def run_to_completion(run_dir: Path, spec: ContainerSpec, timeout_s: float, client: DockerClient | None = None
                      ) -> float:
    """Run a one-shot container (an engine build) until it exits, its output in engine.log; returns its
    seconds. It is removed on every path (and by the lifeline's watcher if this process dies); a non-zero
    exit or running past `timeout_s` is an EngineStartError carrying the end of its log."""
    kwargs = run_kwargs(spec, None, container_name(spec), run_dir.name)
    kwargs.pop("ports")  # a build serves nothing
    with _running(run_dir, spec, kwargs, client or docker_client()) as (container, _, started_at):
        while (code := _exit_code(container)) is None:
            if time.monotonic() - started_at > timeout_s:
                raise EngineStartError(f"{spec.engine} did not finish within {timeout_s:.0f} s; the end of its "
                                       f"log:\n{_logs_tail(container)}")
            time.sleep(0.5)
        if code != 0:
            raise EngineStartError(f"{spec.engine} exited with code {code}; the end of its log:\n"
                                   f"{_logs_tail(container)}")
        return time.monotonic() - started_at


@contextmanager
def _running(run_dir: Path, spec: ContainerSpec, kwargs: dict[str, Any],
             client: DockerClient) -> Iterator[tuple[Container, Image, float]]:
    """The container started (its image pulled first if need be, not timed), its output copied into
    engine.log as it comes, and when it started; stopped and removed on leaving, however left, and by the
    lifeline's watcher if this process dies."""
    log_path = run_dir / ENGINE_LOG
    with log_path.open("ab") as log:
        image = ensure_image(client, spec.image, log)
    started_at = time.monotonic()
    watcher = lifeline.start_watcher(log_path, container=kwargs["name"])  # before the container exists: no gap
    try:
        container = client.containers.run(**kwargs)
    except BaseException as exc:
        lifeline.remove_containers(lifeline.owner_id(), kwargs["name"], client, settle_s=0)
        lifeline.stand_down(watcher)
        _refuse_a_taken_port(exc, kwargs)
        raise
    follower = threading.Thread(target=_follow_logs, args=(container, log_path), daemon=True)
    follower.start()
    try:
        yield container, image, started_at
    finally:
        stop_and_remove(container)
        lifeline.stand_down(watcher)
        follower.join(timeout=5)


def published_port(spec: ContainerSpec, container: Container) -> int:
    """The host port the runtime published the engine's port on (127.0.0.1's); a container that died
    before it had one says why."""
    container.reload()
    bindings = (container.attrs.get("NetworkSettings") or {}).get("Ports") or {}
    found = [b for b in bindings.get(f"{spec.container_port}/tcp") or [] if b.get("HostIp") == "127.0.0.1"]
    if found and str(found[0].get("HostPort") or "").isdigit():
        return int(found[0]["HostPort"])
    code = _exit_code(container)
    if code is not None:
        raise EngineStartError(f"{spec.engine} container exited with code {code} during start-up; last lines of "
                               f"its log:\n{_logs_tail(container)}")
    raise EngineStartError(f"{spec.engine} container: the runtime published no 127.0.0.1 port for "
                           f"{spec.container_port}/tcp ({bindings or 'none'})")


def _refuse_a_taken_port(exc: BaseException, kwargs: dict[str, Any]) -> None:
    """The runtime could not bind the port asked for: someone took it after it was found free."""
    binding = next(iter(kwargs.get("ports", {}).values()), ())
    text = str(exc)
    if len(binding) == 2 and ("address already in use" in text or "port is already allocated" in text):
        port = int(binding[1])
        who = "; ".join(holder.describe() for holder in ports.holders(port)) or "another process"
        raise EngineStartError(f"port {port} is already in use on 127.0.0.1 ({who}); choose another with "
                               "--port, or leave --port out and the container runtime picks a free one") from None


def _details(spec: ContainerSpec, image: Image, container: Container, time_to_ready_s: float) -> dict[str, Any]:
    """What run.json keeps of a container: its image (and digests), name, command and GPUs, its shared
    memory and Hugging Face cache as given, and the names of its environment variables only: their values
    (tokens) are never written."""
    container.reload()  # its main process, once it runs: the run's own, not other work on the machine
    return {"image": spec.image, "image_id": image.id, "image_digests": image.attrs.get("RepoDigests", []),
            "container": container.name, "pid": container.attrs.get("State", {}).get("Pid") or None,
            "command": spec.command, "gpus": spec.gpus, "ipc": "host" if spec.ipc_host else "private",
            "shm_size": spec.shm_size, **({"hf_cache": spec.cache.record()} if spec.cache else {}),
            "time_to_ready_s": round(time_to_ready_s, 3), "env_names": sorted(spec.env)}


def _follow_logs(container: Container, log_path: Path) -> None:
    """Copy the container's output into engine.log as it comes, until the container stops."""
    try:
        with log_path.open("ab") as log:
            for chunk in container.logs(stream=True, follow=True):
                log.write(chunk)
                log.flush()
    except Exception:  # the container is gone: nothing more to copy
        return


def _exit_code(container: Container) -> int | None:
    """The container's exit code once it has stopped, else None."""
    container.reload()
    if container.status not in ("exited", "dead"):
        return None
    return int(container.attrs["State"]["ExitCode"])


def _logs_tail(container: Container) -> str:
    try:
        return container.logs(tail=LOG_TAIL_LINES).decode("utf-8", "replace").rstrip() or "(empty log)"
    except Exception:
        return "(no log)"


def stop_and_remove(container: Container, timeout_s: int = 15) -> None:
    """SIGTERM, then SIGKILL after `timeout_s`, then remove: nothing is left behind (and a stop signal
    arriving meanwhile waits until it is done)."""
    with stop_signals_held():
        lifeline.stop_and_remove_container(container, timeout_s)
