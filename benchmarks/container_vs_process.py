"""The same engine as a process and inside a container should give the same curve, within noise.

Sweeps the reference engine twice with one workload: launched as a local process, then inside a podman
container (Docker API) built from an empty image with this machine's Python and this project mounted
read-only, so both run the same code on the same cores (tests/podman.py). Prints output tokens/s and TTFT
per level and the container/process ratio. Needs podman; it serves podman's Docker API itself.

    python benchmarks/container_vs_process.py [--model default] [--levels 1,4,8] [--duration 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/podman.py

from bench.flows.sweep import SweepPlan, run_sweep  # noqa: E402
from bench.inputs.scenario import Scenario  # noqa: E402
from engines.engine_file import EngineFile  # noqa: E402
from engines.registry import make_launcher  # noqa: E402
from loadgen.metrics import LevelSummary  # noqa: E402
from loadgen.workload import LengthDistribution, Workload  # noqa: E402
from tests.podman import podman_docker_api, reference_container_file  # noqa: E402


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
    with tempfile.TemporaryDirectory() as tmp, podman_docker_api(Path(tmp)):
        process = sweep(EngineFile(engine="reference", model=args.model, args={"served-model-name": args.model}),
                        levels, args.duration, args.out)
        container = sweep(EngineFile.model_validate(reference_container_file(args.model)), levels, args.duration,
                          args.out)
    for p, c in zip(process, container, strict=True):
        by_process, by_container = p.throughput.output_tokens_per_s, c.throughput.output_tokens_per_s
        print(f"{p.level:>4s}  process {by_process:7.1f} tok/s, TTFT p50 {p.latency.ttft_ms.p50:8.1f} ms  |  "
              f"container {by_container:7.1f} tok/s, TTFT p50 {c.latency.ttft_ms.p50:8.1f} ms  |  "
              f"container/process {by_container / by_process:.3f}", flush=True)


if __name__ == "__main__":
    main()
