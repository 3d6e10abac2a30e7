"""Several replicas of one local engine behind an existing router: `vllm-router` (PyPI), never our own.

Each replica is the engine's own launcher, on a free port, its log in `replica-<i>/engine.log`; the router
starts once every replica is ready, is given their URLs and a policy (round_robin, cache_aware,
power_of_two, ...), and is the endpoint the load generator talks to. Everything started is stopped on every
path, the router first. The router comes from `$BENCH_VLLM_ROUTER` (its executable, e.g. in an environment
of its own), else this interpreter's environment, else `vllm-router` on PATH.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from pathlib import Path
from urllib.parse import urlparse

from engines.budget import ReplicaBudget, machine_cpus, machine_gpus, split_budgets
from engines.launch import ENGINE_LOG, EngineStartError, ProcessSpec, local_port, run_process
from engines.types import Endpoint, EngineInfo, Launcher

ROUTER_ENV = "BENCH_VLLM_ROUTER"
POLICIES = ("round_robin", "cache_aware", "power_of_two", "random", "consistent_hash")
REPLICA_DIR = "replica-{index}"


def find_router() -> str:
    """The vllm-router executable; a one-line error saying how to install it otherwise."""
    given = os.environ.get(ROUTER_ENV)
    if given:
        if not (Path(given).is_file() and os.access(given, os.X_OK)):
            raise EngineStartError(f"${ROUTER_ENV}={given} is not an executable: point it at vllm-router")
        return given
    beside = Path(sys.executable).parent / "vllm-router"  # installed with this environment, not activated
    found = str(beside) if beside.is_file() else shutil.which("vllm-router")
    if found is None:
        raise EngineStartError("--replicas needs a router: pip install vllm-router (in this environment, or in one "
                               f"of its own with ${ROUTER_ENV}=/path/to/bin/vllm-router)")
    return found


def check_replicas(count: int, policy: str) -> None:
    if count < 1:
        raise ValueError(f"--replicas {count}: expected a whole number >= 1 (replicas behind the router)")
    if policy not in POLICIES:
        raise ValueError(f"--router-policy {policy}: choose one of {', '.join(POLICIES)}")


def budgeted(make: Callable[[ReplicaBudget], Launcher], count: int, gpus_per_replica: int | None = None,
             gpus: Sequence[int] | None = None,
             cpus: Sequence[int] | None = None) -> list[tuple[Launcher, ReplicaBudget]]:
    """`count` launchers, each given by `make` its budget (engines.budget) of `cpus` and `gpus` (default: this
    machine's). Raises ValueError when the GPUs are too few."""
    budgets = split_budgets(count, cpus or machine_cpus(), machine_gpus() if gpus is None else gpus, gpus_per_replica)
    return [(make(budget), budget) for budget in budgets]


@contextmanager
def launch_replicas(replicas: Sequence[tuple[Launcher, ReplicaBudget]], run_dir: Path, policy: str = "round_robin",
                    port: int | None = None, ready_timeout_s: float = 120.0,
                    router_args: dict[str, str] | None = None) -> Iterator[tuple[Endpoint, EngineInfo]]:
    """Each replica (a launcher on a free port, within its budget), then the router in front of them, given
    `router_args` as its own flags (`balance-abs-threshold=4` -> `--balance-abs-threshold 4`)."""
    count = len(replicas)
    check_replicas(count, policy)
    extra = router_flags(router_args or {})
    router = find_router()
    with ExitStack() as stack:
        running = []
        for index, (replica, _) in enumerate(replicas):
            replica_dir = run_dir / REPLICA_DIR.format(index=index)
            replica_dir.mkdir(parents=True, exist_ok=True)
            running.append(stack.enter_context(replica(replica_dir)))
        port, root = local_port(port)
        roots = [endpoint.base_url.removesuffix("/v1") for endpoint, _ in running]
        command = [router, "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *roots, "--policy", policy,
                   "--prometheus-host", "127.0.0.1", "--prometheus-port", str(local_port(None)[0]), *extra]
        # /readiness answers without the key the replicas may want, which /v1/models passes on
        spec = ProcessSpec("vllm-router", command, [root + "/v1/models", root + "/readiness"],
                           ready_timeout_s=ready_timeout_s)
        started = stack.enter_context(run_process(spec, run_dir / ENGINE_LOG))
        first = running[0][1]
        details = {"router": {"command": command, "policy": policy, "args": dict(router_args or {}), "pid": started.pid,
                              "time_to_ready_s": round(started.time_to_ready_s, 3)},
                   "replicas": [{"base_url": endpoint.base_url, "metrics_url": _metrics_url(endpoint.base_url),
                                 **asdict(info), "budget": budget.as_record(), "budget_text": budget.describe()}
                                for (endpoint, info), (_, budget) in zip(running, replicas, strict=True)]}
        info = EngineInfo(name=f"{first.name} x{count}", model=first.model, version=first.version,
                          launched_by="bench", details=details)
        yield Endpoint(root + "/v1", first.model, running[0][0].api_key_env), info  # the router passes the key on


RESERVED_ROUTER_FLAGS = ("host", "port", "worker-urls", "policy", "prometheus-host", "prometheus-port")


def router_flags(args: dict[str, str]) -> list[str]:
    """`{"balance-abs-threshold": "4"}` -> `--balance-abs-threshold 4`; what the launcher sets itself is refused."""
    flags = []
    for key, value in args.items():
        name = key.removeprefix("--").replace("_", "-")
        if name in RESERVED_ROUTER_FLAGS:
            raise EngineStartError(f"--router-arg {key}: set by bench itself (use --router-policy or --port)")
        flags += [f"--{name}", value]
    return flags


def replica_metrics_urls(info: EngineInfo) -> list[str]:
    """Each replica's own /metrics URL, as `launch_replicas` (or an endpoint given --replica-metrics)
    recorded them; none for a single engine."""
    return [r["metrics_url"] for r in info.details.get("replicas", [])]


def _metrics_url(base_url: str) -> str:
    return base_url.rstrip("/").removesuffix("/v1") + "/metrics"  # served beside the API, not under it


def check_metrics_urls(urls: list[str]) -> list[str]:
    """`--replica-metrics` URLs: http(s) with a host; a bare `http://pod:8000` gets `/metrics` added."""
    checked = []
    for url in urls:
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"--replica-metrics {url}: expected an http(s) URL with a host, e.g. "
                             "http://10.0.0.7:8000/metrics")
        checked.append(url if parsed.path.rstrip("/").endswith("/metrics") else _metrics_url(url))
    return checked
