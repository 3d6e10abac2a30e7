"""Each replica's share of the machine (engines.budget): cores split without overlap, a thread per core, GPUs
split, and a real process started pinned to its cores with its thread budget in its environment."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engines.budget import ReplicaBudget, split_budgets
from engines.launch import ProcessSpec, free_port, run_process


def test_two_replicas_on_two_cores_get_one_core_and_one_thread_each() -> None:
    first, second = split_budgets(2, [0, 1])
    assert (first.cpus, first.threads, second.cpus, second.threads) == ((0,), 1, (1,), 1)
    assert first.env() == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    assert first.gpus is None and "CUDA_VISIBLE_DEVICES" not in first.env()
    assert first.describe() == "core 0, 1 thread"


def test_cores_that_do_not_divide_go_to_the_first_replicas_and_too_many_replicas_share() -> None:
    assert [b.cpus for b in split_budgets(2, [0, 1, 2, 3, 4])] == [(0, 1, 2), (3, 4)]
    assert split_budgets(2, [0, 1, 2, 3, 4])[0].describe() == "cores 0-2, 3 threads"
    shared = split_budgets(3, [0, 1])
    assert [b.cpus for b in shared] == [(0,), (1,), (0,)] and all(b.shares_cores for b in shared)
    assert shared[2].describe() == "core 0, 1 thread (shared: more replicas than cores)"


def test_gpus_are_split_into_each_replicas_own_devices() -> None:
    budgets = split_budgets(2, [0, 1, 2, 3], gpus=[0, 1, 2, 3])
    assert [b.env()["CUDA_VISIBLE_DEVICES"] for b in budgets] == ["0,1", "2,3"]
    assert [b.gpus for b in split_budgets(2, [0, 1], gpus=[4, 5, 6, 7], gpus_per_replica=1)] == [(4,), (5,)]
    with pytest.raises(ValueError, match="--replicas 3 x 2 GPU\\(s\\) each needs 6 GPUs; this machine shows 4"):
        split_budgets(3, [0, 1], gpus=[0, 1, 2, 3], gpus_per_replica=2)


def test_a_process_is_started_pinned_to_its_cores_with_its_thread_budget(tmp_path: Path) -> None:
    budget = ReplicaBudget(0, cpus=(0,), threads=1)
    port = free_port()
    spec = ProcessSpec("http.server", [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
                       [f"http://127.0.0.1:{port}/"], env=budget.env(), ready_timeout_s=30, cpus=budget.cpus)
    with run_process(spec, tmp_path / "engine.log") as started:
        status = Path(f"/proc/{started.pid}/status").read_text()
        environ = Path(f"/proc/{started.pid}/environ").read_bytes().split(b"\0")
    allowed = next(line for line in status.splitlines() if line.startswith("Cpus_allowed_list:"))
    assert allowed.split()[-1] == "0"
    assert b"OMP_NUM_THREADS=1" in environ and b"MKL_NUM_THREADS=1" in environ
