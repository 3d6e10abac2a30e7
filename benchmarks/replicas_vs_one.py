"""Two replicas behind vllm-router against one engine on the same machine and workload: output tokens/s of
each, run alternately, and the ratio as a median over runs.

Each replica gets its share of the cores (engines.budget); on a machine where one engine already uses every
core, two replicas should give about what one does (the issue's floor: 0.9x), not the 0.28x of two engines
fighting over every core.

    python benchmarks/replicas_vs_one.py [--runs 3] [--duration 20] [--concurrency 8] [--model default]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sweep(out: Path, model: str, concurrency: int, duration: float, replicas: int) -> tuple[float, str]:
    command = [sys.executable, "-m", "bench", "sweep", "--model", model, "--concurrency", str(concurrency),
               "--duration", str(duration), "--shared-prefix", "4:512", "--output-tokens", "64", "--no-report",
               "--out", str(out)]
    if replicas > 1:
        command += ["--replicas", str(replicas), "--router-policy", "round_robin"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({' '.join(command)}):\n{done.stderr[-2000:]}")
    (run_dir,) = out.iterdir()
    (summary,) = json.loads((run_dir / "summary.json").read_text())
    details = json.loads((run_dir / "run.json").read_text())["engine"]["details"]
    budgets = "; ".join(r.get("budget_text") or "-" for r in details.get("replicas") or [])
    return summary["output_tokens_per_s"], budgets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--model", default="default")
    args = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as scratch:
        for run in range(args.runs):
            one, _ = sweep(Path(scratch, f"one-{run}"), args.model, args.concurrency, args.duration, 1)
            two, budgets = sweep(Path(scratch, f"two-{run}"), args.model, args.concurrency, args.duration, 2)
            ratios.append(two / one)
            print(f"run {run + 1}: one engine {one:.1f} tok/s, two replicas {two:.1f} tok/s ({budgets}): "
                  f"{two / one:.2f}x", flush=True)
    print(f"median of {args.runs}: two replicas give {statistics.median(ratios):.2f}x one engine's output tokens/s "
          f"(range {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
