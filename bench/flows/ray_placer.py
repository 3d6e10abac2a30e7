"""Measuring jobs placed by Ray (`bench tune --cluster ADDRESS`, `bench sweep --cluster ADDRESS`): each a tune's
configuration or a sweep's engine, a Ray actor that asks for what it needs (`--gpus-per-config K` GPUs and
`--cpus-per-config N` cores, or `--gpus-per-engine`, `--cpus-per-engine`) and runs its sweep on the node Ray
gives it (`bench.flows.node_run.NodeRun`), the engine and the load on that one node.

Every node needs the toolkit's dependencies in the driver's Python version (`pip install
'llm-selfhost-bench[ray,reference]'`, or the extras of the engines measured); our own packages are sent from the
driver with the job, so the nodes run the driver's code. The actors belong to the driver: `close` kills them,
and Ray kills them if the driver dies; each one's sweep, and the engine it launched, dies with its actor.
"""

from __future__ import annotations

import re
import socket
import tempfile
from pathlib import Path
from typing import Any

from bench.flows.node_run import STAGING_PREFIX, NodeRun, Shipment, clear_stale_staging, package_folders
from bench.flows.placed import ClusterError, NodeFailed, NodeLost
from loadgen.ray_workers import first_line, join

INSTALL_HINT = "pip install 'llm-selfhost-bench[ray]' (and the engine's extra, e.g. [reference]) on every node"


class _JobActor:
    """One job on the node Ray placed it on."""

    def __init__(self, spec: dict[str, Any], files: dict[str, bytes]) -> None:
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        node = f"{socket.gethostname()} {ray.util.get_node_ip_address()} ({node_id[:8]})"
        clear_stale_staging(Path(tempfile.gettempdir()))
        self.run = NodeRun(Path(tempfile.mkdtemp(prefix=STAGING_PREFIX)), spec, files, node)

    def poll(self, applied: int) -> Shipment:
        return self.run.poll(applied)

    def stop(self) -> None:
        self.run.stop()

    def close(self) -> None:
        self.run.close()


class RayPlacer:
    """A `bench.flows.placed.Placer` on the Ray cluster at `address`, each job asking for `gpus` GPUs and `cpus`
    cores; `per` names the flags that ask (`config`: --gpus-per-config, `engine`: --gpus-per-engine)."""

    def __init__(self, address: str, gpus: float = 0, cpus: float = 1, per: str = "config") -> None:
        try:
            import ray
        except ImportError:
            raise ClusterError(f"--cluster {address}: the ray package is not installed in this environment; "
                               f"{INSTALL_HINT}") from None
        self.ray, self.address = ray, address
        sizes = f"--gpus-per-{per} {gpus:g} --cpus-per-{per} {cpus:g}"
        join(address, package_folders(), "--cluster", ClusterError)
        try:
            _check_room(ray, address, gpus, cpus, sizes)
            self.actor = ray.remote(_JobActor).options(num_cpus=cpus, num_gpus=gpus, max_restarts=0,
                                                       max_task_retries=0)
        except ClusterError:
            ray.shutdown()
            raise
        except ValueError as exc:  # Ray's own word on a size it can't ask for (e.g. 1.5 GPUs)
            ray.shutdown()
            raise ClusterError(f"{sizes}: {first_line(str(exc))}") from None
        self.handles: list[_Handle] = []

    def start(self, name: str, spec: dict[str, Any], files: dict[str, bytes]) -> _Handle:
        handle = _Handle(name, self.actor.remote(spec, files))
        self.handles.append(handle)
        return handle

    def poll(self, handle: _Handle, applied: int) -> Shipment | None:
        ray = self.ray
        if handle.waiting is None:
            handle.waiting = handle.actor.poll.remote(applied)
        ready, _ = ray.wait([handle.waiting], timeout=0)
        if not ready:
            return None
        ref, handle.waiting = handle.waiting, None
        unavailable = getattr(ray.exceptions, "ActorUnavailableError", ())
        try:
            shipment = ray.get(ref)
        except unavailable:  # out of touch for a moment (its node may come back): asked again next time
            return None
        except ray.exceptions.RayActorError as exc:
            if not handle.heard:  # it never ran: e.g. a dependency missing on that node
                raise NodeFailed(f"it could not start on its node: {_cause(str(exc))}; {INSTALL_HINT}") from None
            raise NodeLost(f"its Ray actor died ({first_line(str(exc))})") from None
        except ray.exceptions.RayTaskError as exc:
            raise NodeLost(f"its node's poll failed ({first_line(str(exc.cause))})") from None
        handle.heard = True
        return shipment

    def stop(self, handle: _Handle) -> None:
        handle.actor.stop.remote()

    def release(self, handle: _Handle) -> None:
        try:
            self.ray.get(handle.actor.close.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - a node already gone is what we want
            pass
        self._kill(handle)

    def close(self) -> None:
        for handle in self.handles:
            self._kill(handle)
        self.ray.shutdown()

    def _kill(self, handle: _Handle) -> None:
        try:
            self.ray.kill(handle.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - one already gone is what we want
            pass


class _Handle:
    def __init__(self, name: str, actor: Any) -> None:
        self.name, self.actor = name, actor
        self.waiting: Any = None  # the poll asked and not yet answered
        self.heard = False  # it has answered a poll: it ran


def _check_room(ray: Any, address: str, gpus: float, cpus: float, sizes: str) -> None:
    """A ClusterError naming the flags (`sizes`) when no node of the cluster could ever hold one job (Ray would
    wait for one for ever)."""
    nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    if any(node.get("GPU", 0) >= gpus and node.get("CPU", 0) >= cpus for node in nodes):
        return
    have = "; ".join(f"{node.get('CPU', 0):g} CPUs, {node.get('GPU', 0):g} GPUs" for node in nodes) or "no node"
    raise ClusterError(f"{sizes}: no node of the cluster at {address} has that much (its nodes: {have})")


def _cause(text: str) -> str:
    """The exception a Ray error's text ends with (`ModuleNotFoundError: No module named 'torch'`), else its
    first line."""
    raised = [line.strip() for line in text.splitlines() if re.match(r"\s*[A-Za-z_.]+(Error|Exception)\b:", line)]
    return raised[-1][:300] if raised else first_line(text)
