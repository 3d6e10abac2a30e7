"""A tune grid (or a sweep of several engines) placed across a Ray cluster against the same run one
configuration (engine) after another.

Starts a local Ray cluster of NODES nodes (tests/e2e/ray_cluster.py, one CPU each, on 127.0.0.1), then in
turns runs the same four configurations of the reference engine (default, max-num-seqs=1,2,8) with
`bench tune --cluster` and with plain `bench tune` (with `--sweep`: the four as engine files of one
`bench sweep`, with and without `--cluster`), and prints each one's wall time, the median ratio, and each
configuration's peak output tokens/s both ways. Run it with the Python of an environment that has ray, with
PYTHONPATH at this repository:

    PYTHONPATH=. $BENCH_RAY/bin/python benchmarks/tune_cluster.py [--rounds 3] [--nodes 3] [--duration 5] [--sweep]

On one machine the nodes share its cores: the placed grid saves the time the configurations spend starting,
loading and reporting, and its figures are those of engines that shared the machine (each level says so).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GRID = ["--model", "dummy:tiny", "--input-tokens", "64", "--output-tokens", "32", "--grid", "max-num-seqs=1,2,8",
        "--objective", "throughput", "--concurrency", "1,8"]


def _tune(env: dict[str, str], out: Path, duration: float, *extra: str) -> tuple[float, dict[str, float]]:
    """One grid: its wall time and each configuration's peak output tokens/s."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "bench", "tune", *GRID, "--duration", f"{duration:g}", "--out", str(out),
                    *extra], check=True, env=env, capture_output=True, timeout=1800)
    wall_s = time.monotonic() - started
    (folder,) = out.glob("tune-*")
    report = json.loads((folder / "tune-report.json").read_text())
    return wall_s, {c["name"]: c["peak_output_tokens_per_s"] for c in report["configs"]}


def _sweep(env: dict[str, str], out: Path, duration: float, *extra: str) -> tuple[float, dict[str, float]]:
    """The four configurations as the engines of one sweep: its wall time and each engine's peak output tokens/s."""
    from bench.run.rundir import read_run

    files = []
    for name, seqs in (("default", None), ("max-num-seqs=1", 1), ("max-num-seqs=2", 2), ("max-num-seqs=8", 8)):
        path = out.parent / f"{out.name}-{len(files)}.yaml"
        path.write_text(f"engine: reference\nname: {name}\nmodel: dummy:tiny\n"
                        + (f"args:\n  max-num-seqs: {seqs}\n" if seqs else ""))
        files += ["--engine-file", str(path)]
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "bench", "sweep", *files, *GRID[2:6], *GRID[10:], "--duration",
                    f"{duration:g}", "--out", str(out), *extra], check=True, env=env, capture_output=True,
                   timeout=1800)
    wall_s = time.monotonic() - started
    runs = [read_run(run_json.parent) for run_json in out.glob("*/run.json")]
    return wall_s, {str(run.info.engine_spec.name): max(s.throughput.output_tokens_per_s for s in run.summaries)
                    for run in runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--sweep", action="store_true", help="a sweep of the four as engines, not a tune")
    args = parser.parse_args()
    measure, what = (_sweep, "sweep of 4 engines") if args.sweep else (_tune, "grid of 4 configurations")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_worker_niceness": "0"}
    holder = subprocess.Popen([sys.executable, str(REPO / "tests" / "e2e" / "ray_cluster.py"), str(args.nodes), "1"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert holder.stdout is not None and holder.stdin is not None
    address = json.loads(holder.stdout.readline())["address"]
    walls: dict[str, list[float]] = {"placed": [], "serial": []}
    peaks: dict[str, dict[str, list[float]]] = {"placed": {}, "serial": {}}
    try:
        with tempfile.TemporaryDirectory() as root:
            for round_index in range(args.rounds):
                for mode in ("placed", "serial") if round_index % 2 == 0 else ("serial", "placed"):
                    extra = ["--cluster", address] if mode == "placed" else []
                    wall_s, figures = measure(env, Path(root, f"{mode}-{round_index}"), args.duration, *extra)
                    walls[mode].append(wall_s)
                    for name, value in figures.items():
                        peaks[mode].setdefault(name, []).append(value or 0.0)
                    print(f"round {round_index + 1} {mode}: {wall_s:.1f} s", flush=True)
    finally:
        holder.stdin.close()
        holder.wait(timeout=120)
    placed, serial = statistics.median(walls["placed"]), statistics.median(walls["serial"])
    print(f"\n{what}, levels 1,8 of {args.duration:g} s, {args.nodes} nodes of one CPU, "
          f"median of {args.rounds}")
    print(f"placed on the cluster: {placed:.1f} s; one after another: {serial:.1f} s; x{serial / placed:.2f}")
    print("\n| configuration | peak out tok/s placed | one after another |\n|---|---|---|")
    for name in peaks["serial"]:
        print(f"| {name} | {statistics.median(peaks['placed'][name]):.1f} | "
              f"{statistics.median(peaks['serial'][name]):.1f} |")


if __name__ == "__main__":
    main()
