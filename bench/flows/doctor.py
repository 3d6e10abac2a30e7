"""`bench doctor`: what this machine can run, and how to get the rest, as typed findings (never printed here).

Every check runs at once, each in a daemon thread: one that hangs (a Docker API that accepts and never answers,
an environment's Python that never starts) is reported as not answering after `timeout_s` and left behind, so
the command still ends; one that raises is reported as that check failing, never a traceback. The main job
(`bench sweep` of the reference engine on the default model) can run when every required finding is ok.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from bench.flows import doctor_needed as needed
from bench.flows import doctor_optional as optional
from bench.flows.doctor_types import Check, Finding, Report

CHECK_TIMEOUT_S = 60.0  # importing torch or starting another environment's Python on a busy machine takes seconds


def checks(out: Path, model: Path | None) -> list[Check]:
    """The main job's checks first (in the order a newcomer installs them), then the optional pieces."""
    return [
        Check("python", needed.check_python, required=True),
        Check("torch", needed.check_torch, required=True),
        Check("reference engine packages", needed.check_reference_packages, required=True),
        Check("model", lambda: needed.check_model(model), required=True),
        Check("runs folder", lambda: needed.check_runs_folder(out), required=True),
        Check("ports on 127.0.0.1", needed.check_ports, required=True),
        Check("CUDA GPUs (torch)", optional.check_cuda),
        Check("GPU telemetry (NVML)", optional.check_nvml),
        Check("podman / docker", optional.check_container_runtime),
        Check("docker API", optional.check_docker_api),
        Check("engine kinds", optional.check_engine_kinds),
        Check("ray", optional.check_ray),
        Check("lm-eval", optional.check_lm_eval),
        Check("guidellm", optional.check_guidellm),
        Check("aiperf", optional.check_aiperf),
        Check("vllm-router", optional.check_router),
        Check("schemathesis", optional.check_schemathesis),
    ]


def diagnose(out: Path = Path("runs"), model: Path | None = None, timeout_s: float = CHECK_TIMEOUT_S) -> Report:
    """Every check of this machine: for the runs folder `out`, and `model` (None: the default model)."""
    return Report(tuple(run_checks(checks(out, model), timeout_s)))


def run_checks(to_run: Sequence[Check], timeout_s: float) -> list[Finding]:
    """The checks' findings in their order; each check gets `timeout_s` from the start, all running together."""
    results: dict[int, list[Finding]] = {}
    threads = [threading.Thread(target=lambda i=i, check=check: results.__setitem__(i, _run_one(check)),
                                name=f"doctor: {check.name}", daemon=True)  # a hung one must not hold the exit
               for i, check in enumerate(to_run)]
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    findings = []
    for i, check in enumerate(to_run):
        late = [Finding(check.name, "not usable", f"the check did not answer within {timeout_s:g} s")]
        findings += [replace(f, required=check.required) for f in results.get(i, late)]
    return findings


def _run_one(check: Check) -> list[Finding]:
    try:
        found = check.probe()
    except Exception as exc:  # a check that raises is that check failing, said in one line
        return [Finding(check.name, "not usable", f"the check failed: {type(exc).__name__}: {exc}")]
    return found if isinstance(found, list) else [found]
