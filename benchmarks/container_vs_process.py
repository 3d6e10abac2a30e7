"""The same engine as a process and inside a container should give the same curve, within noise.

Sweeps the reference engine twice with one workload: launched as a local process, then inside a podman
container (Docker API) built from an empty image with this machine's Python and this project mounted
read-only, so both run the same code on the same cores. Prints output tokens/s and TTFT per level and
the container/process ratio. Needs podman; it serves podman's Docker API itself when DOCKER_HOST is unset.

    python benchmarks/container_vs_process.py [--model default] [--levels 1,4,8] [--duration 20]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from bench.scenario import Scenario
from bench.sweep import SweepPlan, run_sweep
from engines.engine_file import EngineFile
from engines.registry import make_launcher
from loadgen.metrics import LevelSummary
from loadgen.workload import LengthDistribution, Workload

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "localhost/bench-empty:test"


def podman_api(folder: Path) -> subprocess.Popen[bytes] | None:
    """Serve podman's Docker API on a socket of our own (unless DOCKER_HOST already names one)."""
    env = {**os.environ, "CONTAINERS_CONF": str(ROOT / "tests" / "containers.conf")}
    os.environ["CONTAINERS_CONF"] = env["CONTAINERS_CONF"]
    rootfs = folder / "rootfs"
    for name in ("tmp", "proc", "sys", "dev", "etc", "root", "usr", "lib", "lib64", "bin", "sbin"):
        (rootfs / name).mkdir(parents=True, exist_ok=True)
    with tarfile.open(folder / "rootfs.tar", "w") as tar:
        tar.add(rootfs, arcname=".")
    subprocess.run(["podman", "import", str(folder / "rootfs.tar"), IMAGE], env=env, check=True, capture_output=True)
    if os.environ.get("DOCKER_HOST"):
        return None
    socket = folder / "podman.sock"
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket}"], env=env)
    while not socket.exists():
        time.sleep(0.1)
    os.environ["DOCKER_HOST"] = f"unix://{socket}"
    return service


def container_spec(model: str) -> EngineFile:
    mounts = ["/usr", "/lib", "/lib64", "/bin", "/sbin", sys.base_prefix, sys.prefix, str(ROOT)]
    return EngineFile(
        engine="container", name="reference-container", image=IMAGE, gpus="none", served_model=model,
        command=[sys.executable, "-m", "engines.reference", "--model", model, "--served-model-name", model,
                 "--host", "0.0.0.0", "--port", "8000"],
        container_port=8000, working_dir=str(ROOT), ready_timeout_s=300,
        volumes={path: f"{path}:ro" for path in dict.fromkeys(mounts) if Path(path).exists()},
    )


def sweep(spec: EngineFile, levels: list[int], duration_s: float, out: Path) -> list[LevelSummary]:
    workload = Workload(input_tokens=LengthDistribution(value=64), output_tokens=LengthDistribution(value=64))
    scenario = Scenario.model_validate({"name": "container-vs-process", "workload": workload.model_dump(),
                                        "load": {"concurrency": levels, "duration_s": duration_s}})
    plan = SweepPlan(scenario, out, engine_kind=spec.name or spec.engine)
    return run_sweep(plan, make_launcher(spec)).summaries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--levels", default="1,4,8")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=Path("runs/container-vs-process"))
    args = parser.parse_args()
    levels = [int(v) for v in args.levels.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        service = podman_api(Path(tmp))
        try:
            process = sweep(EngineFile(engine="reference", model=args.model, args={"served-model-name": args.model}),
                            levels, args.duration, args.out)
            container = sweep(container_spec(args.model), levels, args.duration, args.out)
        finally:
            if service is not None:
                service.terminate()
                service.wait(timeout=20)
    for p, c in zip(process, container, strict=True):
        print(f"{p.level:>4s}  process {p.output_tokens_per_s:7.1f} tok/s, TTFT p50 {p.ttft_ms.p50:8.1f} ms  |  "
              f"container {c.output_tokens_per_s:7.1f} tok/s, TTFT p50 {c.ttft_ms.p50:8.1f} ms  |  "
              f"container/process {c.output_tokens_per_s / p.output_tokens_per_s:.3f}", flush=True)


if __name__ == "__main__":
    main()
