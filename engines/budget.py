"""What each replica on one machine may use: its share of the CPU cores (pinned by affinity, with as many
threads as cores) and its own GPUs.

Replicas left to themselves each start PyTorch (or OpenMP, or llama.cpp) with a thread per core of the whole
machine, and two of them on two cores fight over both: on this project's 2-core machine two replicas gave
0.28x one engine's tokens/s (issue 30's measurement). Given a budget each, they gave 1.04x (median of 3,
benchmarks/replicas_vs_one.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclass(frozen=True)
class ReplicaBudget:
    index: int
    cpus: tuple[int, ...]  # the cores it is pinned to
    threads: int  # its compute threads (torch / OpenMP), one per core of its share
    gpus: tuple[int, ...] | None = None  # its devices (CUDA_VISIBLE_DEVICES); None on a machine without GPUs
    shares_cores: bool = False  # more replicas than cores: its core is another replica's too

    def env(self) -> dict[str, str]:
        env = {name: str(self.threads) for name in THREAD_VARS}
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, self.gpus))
        return env

    def describe(self) -> str:
        cores = f"core{'s' if len(self.cpus) > 1 else ''} {_ranges(self.cpus)}"
        gpus = f", GPU {','.join(map(str, self.gpus))}" if self.gpus is not None else ""
        shared = " (shared: more replicas than cores)" if self.shares_cores else ""
        return f"{cores}, {self.threads} thread{'s' if self.threads > 1 else ''}{gpus}{shared}"

    def as_record(self) -> dict[str, object]:
        gpus = None if self.gpus is None else list(self.gpus)
        return {"cpus": list(self.cpus), "threads": self.threads, "gpus": gpus, "shares_cores": self.shares_cores,
                "env": self.env()}


def split_budgets(count: int, cpus: Sequence[int], gpus: Sequence[int] | None = None,
                  gpus_per_replica: int | None = None) -> list[ReplicaBudget]:
    """`count` replicas over the cores `cpus` (contiguous shares, the first ones a core more when they do not
    divide) and the devices `gpus` (`gpus_per_replica` each, else an equal share). Raises ValueError when the
    GPUs are too few for a device each."""
    cpus = sorted(cpus)
    if count < 1 or not cpus:
        raise ValueError(f"a budget needs at least one replica and one core (got {count} and {len(cpus)})")
    per_gpu = None
    if gpus:
        per_gpu = gpus_per_replica or len(gpus) // count
        if per_gpu < 1 or per_gpu * count > len(gpus):
            raise ValueError(f"--replicas {count} x {gpus_per_replica or 1} GPU(s) each needs "
                             f"{count * (gpus_per_replica or 1)} GPUs; this machine shows {len(gpus)} "
                             f"({','.join(map(str, gpus))})")
    budgets = []
    base, extra = divmod(len(cpus), count)
    start = 0
    for index in range(count):
        if base == 0:  # more replicas than cores: one core each, in turn
            share: tuple[int, ...] = (cpus[index % len(cpus)],)
        else:
            size = base + (1 if index < extra else 0)
            share, start = tuple(cpus[start:start + size]), start + size
        devices = tuple(gpus[index * per_gpu:(index + 1) * per_gpu]) if gpus and per_gpu else None
        budgets.append(ReplicaBudget(index, share, len(share), devices, shares_cores=base == 0))
    return budgets


def machine_cpus() -> list[int]:
    """The cores this process may run on (its own affinity, which a container or taskset may have narrowed)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def machine_gpus() -> list[int] | None:
    """The GPUs replicas may be given: CUDA_VISIBLE_DEVICES's where it is set, else `nvidia-smi -L`'s; None on a
    machine without any."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [part.strip() for part in visible.split(",") if part.strip()]
        return [int(i) for i in ids if i.isdigit()] or None
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    count = sum(1 for line in listed.stdout.splitlines() if line.startswith("GPU "))
    return list(range(count)) or None


def _ranges(cpus: Sequence[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5'."""
    parts, run = [], [cpus[0]]
    for cpu in cpus[1:]:
        if cpu == run[-1] + 1:
            run.append(cpu)
        else:
            parts.append(run)
            run = [cpu]
    parts.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in parts)
