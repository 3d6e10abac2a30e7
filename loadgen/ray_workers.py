"""Client workers as Ray actors (`--ray ADDRESS`): the same worker (`loadgen.worker.WorkerCore`), placed
on the cluster's nodes, one CPU each, spread over the nodes.

Every node needs the toolkit's dependencies (`pip install 'llm-selfhost-bench[ray]'`, the same Python as the
driver); the `loadgen` and `common` packages themselves are sent from the driver with the job, so the
workers run the driver's own code. The actors belong to the driver: each level's are killed when it ends
(and Ray kills them if the driver dies), so nothing is left on the cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loadgen.worker import CALL_TIMEOUT_S, START_TIMEOUT_S, WorkerCore, WorkerFailed, WorkerInfo, answer
from loadgen.worker_proxy import Workers

INSTALL_HINT = "pip install 'llm-selfhost-bench[ray]'"


def require_ray(address: str) -> None:
    """A ValueError naming the flag when the address can't be meant or ray is not installed here."""
    if not address.strip():
        raise ValueError("--ray: expected auto, HOST:PORT or ray://HOST:PORT")
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ValueError(f"--ray {address}: the ray package is not installed in this environment; "
                         f"{INSTALL_HINT}") from None


def _ray() -> Any:
    import ray

    return ray


def join(address: str, modules: list[str], flag: str, error: type[Exception]) -> None:
    """Connected to the cluster at `address` (auto, host:port, or ray://host:port), `modules` (package folders)
    sent with the job; `error` naming `flag` when it can't be joined."""
    try:
        _ray().init(address=address, runtime_env={"py_modules": modules}, log_to_driver=False,
                    logging_level="WARNING")
    except Exception as exc:  # noqa: BLE001 - Ray raises several kinds; each is said the same way
        raise error(f"{flag} {address}: could not join the Ray cluster there ({type(exc).__name__}: "
                    f"{first_line(str(exc))}); start one with `ray start --head`, or give its address") from None


@contextmanager
def connected(address: str) -> Iterator[None]:
    """Connected to the cluster at `address` for the run, this package's code sent with the job."""
    ray = _ray()
    import common
    import loadgen

    join(address, [str(Path(package.__file__).resolve().parent) for package in (loadgen, common)], "--ray",
         WorkerFailed)
    try:
        yield
    finally:
        ray.shutdown()


class _Actor:
    """A worker on the cluster: each call (its name and arguments) answered by the worker's own core."""

    def __init__(self) -> None:
        self.core = WorkerCore()

    def call(self, name: str, *args: Any) -> Any:
        return answer(self.core, name, args)


class RayWorkers(Workers):
    """`count` actors, started and waited for; each call a remote call of the actor's `call`."""

    def __init__(self, count: int) -> None:
        ray = _ray()
        actor = ray.remote(num_cpus=1, max_concurrency=4, max_restarts=0)(_Actor)
        asked = time.perf_counter()
        self.actors: list[Any] = []
        self.infos: list[WorkerInfo] = []
        self.start_s: list[float] = []
        try:
            for _ in range(count):
                self.actors.append(actor.options(scheduling_strategy="SPREAD").remote())
            for index in range(count):
                info = self.actors[index].call.remote(WorkerCore.info.__name__)
                self.infos.append(self._get(index, info, START_TIMEOUT_S))
                self.start_s.append(time.perf_counter() - asked)
        except BaseException:
            self.close()
            raise

    def _call_one(self, index: int, name: str, args: tuple[Any, ...]) -> Any:
        return self._get(index, self.actors[index].call.remote(name, *args), CALL_TIMEOUT_S)

    def _call_each(self, name: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        refs = [self.actors[index].call.remote(name, *arg) for index, arg in enumerate(args)]
        return [self._get(index, ref, CALL_TIMEOUT_S) for index, ref in enumerate(refs)]

    def _get(self, index: int, ref: Any, timeout_s: float) -> Any:
        ray = _ray()
        where = f"pid {self.infos[index].pid} on {self.infos[index].host}" if index < len(self.infos) else "Ray actor"
        try:
            return ray.get(ref, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise WorkerFailed(f"client worker {index} ({where}) did not answer within {timeout_s:g} s") from None
        except ray.exceptions.RayActorError as exc:
            raise WorkerFailed(f"client worker {index} ({where}) died mid-level: "
                               f"{first_line(str(exc))}") from None
        except ray.exceptions.RayTaskError as exc:
            raise WorkerFailed(f"client worker {index} ({where}): {first_line(str(exc.cause))}") from None

    def close(self) -> None:
        ray = _ray()
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - one already gone is what we want
                pass


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no reason given"
