"""The engine kinds `bench` can measure: a plain dict from name to a function that makes a launcher.

Every kind takes the same options (an `EngineFile`, built from flags or read from YAML) and returns a
`Launcher` (`engines.types`). A local process kind's entry is `LocalProcess(kind)`, which hands the kind
to `engines.process.launch_local`, and the kind builds the command line: three calls from the entry to it.
The container kinds import the Docker SDK only when made. Whether a kind can run on this machine is
`engines.availability`'s question, not this module's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from engines.engine_file import EngineFile
from engines.keys import EngineSecrets, SecretArgError, key_in_environment, take_secrets
from engines.lmstudio import launch_lmstudio
from engines.process import (
    LocalKind,
    launch_local,
    llamacpp_engine,
    ollama_engine,
    parse_engine_args,
    reference_engine,
    sglang_engine,
    vllm_engine,
)
from engines.types import Endpoint, EngineInfo, Launcher

if TYPE_CHECKING:
    from engines.docker import ContainerOptions, ContainerSpec


class EngineError(Exception):
    """A problem with the engine choice or its flags; the message says what to change."""


def with_served_model(o: EngineFile) -> EngineFile:
    """An endpoint given no model takes the one its server lists (`engines.endpoint.served_model`; an error
    naming --model when it lists none or several), so run.json records it as if --model had named it. Any other
    engine, and an endpoint with a model, as it is."""
    if o.engine != "endpoint" or o.model or not o.base_url:
        return o
    from engines.endpoint import served_model

    try:
        endpoint = Endpoint(o.base_url.rstrip("/"), "", o.api_key_env)
    except ValueError as exc:
        raise EngineError(f"--base-url: {exc}") from None
    return o.model_copy(update={"model": served_model(endpoint)})


def make_endpoint(o: EngineFile) -> Launcher:
    from engines.endpoint import use_endpoint

    if not o.base_url:
        raise EngineError("--engine endpoint needs --base-url (e.g. http://127.0.0.1:8000/v1)")
    if not o.model:
        raise EngineError("--engine endpoint needs --model (the name the server lists at /v1/models)")
    from engines.replicas import check_metrics_urls

    try:
        endpoint = Endpoint(o.base_url.rstrip("/"), o.model, o.api_key_env)
    except ValueError as exc:
        raise EngineError(f"--base-url: {exc}") from None
    try:
        pods = check_metrics_urls(o.replica_metrics)
    except ValueError as exc:
        raise EngineError(str(exc)) from None
    return lambda run_dir: use_endpoint(endpoint, pods)


@dataclass(frozen=True)
class LocalProcess:
    """A kind run as a local process: `launch_local(kind, ...)` with the engine file's model (or `default`),
    flags and port; `kind` (one of `engines.process`'s) builds the command line."""

    kind: LocalKind

    def __call__(self, o: EngineFile) -> Launcher:
        args = _args(o)  # a bad flag is said now, before anything starts
        cpus = tuple(o.cpus) if o.cpus else None
        adapters = _lora_flags(o, args)
        found = _secrets(o, args)  # in the engine's environment, not its flags; a variable not set is said now
        return lambda run_dir: launch_local(self.kind, run_dir, o.model or "default", found.args, o.port,
                                            o.ready_timeout_s, found.env, cpus, adapters, found.api_key)


def _lmstudio(o: EngineFile) -> Launcher:
    """LM Studio through `lms` (`engines.lmstudio`): its own server, not a process of ours."""
    args = _args(o)
    return lambda run_dir: launch_lmstudio(run_dir, o.model or "default", args, o.port, o.ready_timeout_s)


def _engine_image(to_spec: Callable[[ContainerOptions], ContainerSpec], o: EngineFile) -> Launcher:
    """An engine's own image, our options mapped to its flags by `to_spec` (one of `engines.docker`'s)."""
    from engines.docker import launch_container

    options = _container_options(o)
    if o.lora:  # each adapter mounted read-only, the engine told where
        from engines.lora import container_mounts

        options = replace(options, volumes={**options.volumes, **container_mounts(o.lora)},
                          extra_argv=_lora_flags(o, options.extra_args, in_container=True))
    spec = to_spec(options)
    api_key = _secrets(o, _args(o)).api_key
    return _with_key(lambda run_dir: launch_container(run_dir, spec, o.port), api_key)


def _with_key(launcher: Launcher, api_key: str | None) -> Launcher:
    """`launcher`, its endpoint naming a variable that holds the key its server wants (`engines.keys`)."""
    if not api_key:
        return launcher

    @contextmanager
    def launch(run_dir: Path) -> Iterator[tuple[Endpoint, EngineInfo]]:
        with launcher(run_dir) as (endpoint, info), key_in_environment(api_key) as variable:
            yield replace(endpoint, api_key_env=variable), info

    return launch


def _trtllm(o: EngineFile) -> Launcher:
    """TensorRT-LLM's image: the engine built ahead of time (or found built), then served."""
    from engines.launch import EngineStartError
    from engines.trtllm import check_options, launch_trtllm

    options = _container_options(o)
    try:
        check_options(options)
    except EngineStartError as exc:
        raise EngineError(str(exc)) from None
    return lambda run_dir: launch_trtllm(run_dir, options, o.port)


def _container_options(o: EngineFile) -> ContainerOptions:
    from engines.docker import ContainerOptions

    if not o.model:
        raise EngineError(f"--engine {o.engine} needs --model (a Hugging Face id or a path inside the container)")
    found = _secrets(o, _args(o))  # secrets go to the container's environment, never its command
    return ContainerOptions(
        model=o.model, gpus=_gpus(o), tensor_parallel_size=o.tensor_parallel_size, max_num_seqs=o.max_num_seqs,
        gpu_memory_fraction=o.gpu_memory_fraction, quantization=o.quantization, max_model_len=o.max_model_len,
        extra_args=found.args, image=o.image, ready_timeout_s=o.ready_timeout_s, env=found.env, volumes=o.volumes,
    )


def make_container(o: EngineFile) -> Launcher:
    """Your own image serving the OpenAI API, described in full by the engine file."""
    from engines.docker import ContainerSpec, launch_container

    missing = [name for name in ("image", "command", "container_port", "served_model") if not getattr(o, name)]
    if missing:
        raise EngineError(f"engine `container` needs {', '.join(missing)} in its --engine-file")
    assert o.image and o.command and o.container_port and o.served_model
    spec = ContainerSpec(engine=o.name or "container", image=o.image, command=o.command,
                         container_port=o.container_port, served_model=o.served_model, env=_secrets(o, {}).env,
                         volumes=o.volumes, gpus=_gpus(o), ready_timeout_s=o.ready_timeout_s, ipc_host=False,
                         working_dir=o.working_dir)
    return lambda run_dir: launch_container(run_dir, spec, o.port)


def _args(o: EngineFile) -> dict[str, str]:
    try:
        return parse_engine_args(o.engine_args())
    except ValueError as exc:
        raise EngineError(str(exc)) from None


def _secrets(o: EngineFile, args: dict[str, str]) -> EngineSecrets:
    """The engine's secrets taken out of its flags, for its environment (`engines.keys`)."""
    try:
        return take_secrets(o.engine, args, o.env)
    except SecretArgError as exc:
        raise EngineError(str(exc)) from None


def _lora_flags(o: EngineFile, args: dict[str, str], in_container: bool = False) -> list[str]:
    """The engine's own flags for the adapters it serves (`engines.lora`); a kind that takes none says so."""
    from engines.lora import LoraFlagError, lora_flags

    try:
        return lora_flags(o.engine, o.lora, args, in_container)
    except LoraFlagError as exc:
        raise EngineError(str(exc)) from None


def _gpus(o: EngineFile) -> str | list[int] | None:
    return None if o.gpus == "none" else o.gpus


def _docker() -> ModuleType:
    """`engines.docker`, imported when a container kind is made rather than with this module."""
    from engines import docker

    return docker


ENGINES: dict[str, Callable[[EngineFile], Launcher]] = {
    "reference": LocalProcess(reference_engine),
    "llamacpp": LocalProcess(llamacpp_engine),
    "endpoint": make_endpoint,
    "vllm": LocalProcess(vllm_engine),
    "sglang": LocalProcess(sglang_engine),
    "ollama": LocalProcess(ollama_engine),
    "lmstudio": _lmstudio,
    "vllm-docker": lambda o: _engine_image(_docker().vllm_spec, o),
    "sglang-docker": lambda o: _engine_image(_docker().sglang_spec, o),
    "trtllm-docker": _trtllm,
    "container": make_container,
}


def is_container_kind(kind: str) -> bool:
    return kind == "container" or kind.endswith("-docker")


REPLICABLE = ("reference", "llamacpp", "vllm", "sglang")  # local engines that take any free port


def make_launcher(options: EngineFile) -> Launcher:
    if options.engine not in ENGINES:
        raise EngineError(f"unknown --engine '{options.engine}'; choose one of: {', '.join(sorted(ENGINES))}")
    if options.replica_metrics and options.engine != "endpoint":
        raise EngineError(f"--replica-metrics is for --engine endpoint (a gateway's pods), not '{options.engine}'; "
                          "replicas that bench launches are sampled already")
    if options.ui:
        return _through_ui(options)
    if options.replicas == 1:
        return ENGINES[options.engine](options)
    return _replicated(options)


def _through_ui(o: EngineFile) -> Launcher:
    """The engine as asked, with Open WebUI in front of it."""
    from engines.launch import EngineStartError
    from engines.openwebui import through_openwebui

    engine = make_launcher(o.model_copy(update={"ui": False}))
    try:
        return through_openwebui(engine, o.ui_python)
    except EngineStartError as exc:
        raise EngineError(str(exc)) from None


def _replicated(o: EngineFile) -> Launcher:
    """N replicas of a local engine behind vllm-router: each replica on a free port, the router on --port."""
    from engines.budget import ReplicaBudget
    from engines.launch import EngineStartError
    from engines.replicas import budgeted, check_replicas, launch_replicas, router_flags

    if o.engine not in REPLICABLE:
        raise EngineError(f"--replicas {o.replicas}: only local engines ({', '.join(REPLICABLE)}) are launched as "
                          f"replicas, not '{o.engine}'; for a cluster, measure its gateway with --engine endpoint")
    try:
        check_replicas(o.replicas, o.router_policy)
    except ValueError as exc:
        raise EngineError(str(exc)) from None
    def make(budget: ReplicaBudget) -> Launcher:  # each replica its share of the cores and its own GPUs
        return ENGINES[o.engine](o.model_copy(update={"port": None, "replicas": 1, "env": {**budget.env(), **o.env},
                                                      "cpus": list(budget.cpus)}))

    gpus = o.gpus if isinstance(o.gpus, list) else [] if o.gpus == "none" else None
    try:
        replicas = budgeted(make, o.replicas, o.tensor_parallel_size if o.tensor_parallel_size > 1 else None, gpus,
                            o.cpus)
    except ValueError as exc:
        raise EngineError(str(exc)) from None
    router_args = {key: str(value).lower() if isinstance(value, bool) else str(value)
                   for key, value in o.router_args.items()}
    try:
        router_flags(router_args)  # a flag bench sets itself is refused now, before anything starts
    except EngineStartError as exc:
        raise EngineError(str(exc)) from None
    return lambda run_dir: launch_replicas(replicas, run_dir, o.router_policy, o.port, min(o.ready_timeout_s, 120.0),
                                           router_args)
