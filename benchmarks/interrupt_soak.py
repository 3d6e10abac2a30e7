"""Interrupt sweeps at random moments and check that nothing is left behind.

Runs N sweeps of the reference engine (random weights, so it starts fast) and sends each SIGINT or SIGTERM
at a random moment, start-up included; then checks that no engine process is left running, that every
run directory that was created has a run.json saying how it ended, and that every record line in it is
whole. Prints one line per sweep and a verdict. Usage:

    python benchmarks/interrupt_soak.py [--sweeps 20] [--max-delay 12]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def engines_running() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "engines.reference" in line and " Z" not in line
            and "interrupt_soak" not in line]


def check_run_dir(run_dir: Path) -> str:
    run = json.loads((run_dir / "run.json").read_text())
    records = run_dir / "requests.jsonl"
    lines = records.read_text().splitlines() if records.exists() else []
    for line in lines:
        json.loads(line)  # every record whole
    return f"status={run['status']:<12s} records={len(lines)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweeps", type=int, default=20)
    parser.add_argument("--max-delay", type=float, default=12.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.sweeps):
            out = Path(tmp) / f"sweep{index}"
            sig = rng.choice([signal.SIGINT, signal.SIGTERM])
            delay = rng.uniform(0.5, args.max_delay)
            command = [sys.executable, "-m", "bench", "sweep", "--model", "dummy:tiny", "--concurrency", "1,4",
                       "--duration", "30", "--input-tokens", "32", "--output-tokens", "16", "--no-report",
                       "--out", str(out)]
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(delay)
            process.send_signal(sig)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                problems.append(f"sweep {index}: did not stop within 60 s of {sig.name}")
            left = engines_running()
            if left:
                problems.append(f"sweep {index}: engine still running: {left}")
            run_dirs = list(out.iterdir()) if out.exists() else []
            state = check_run_dir(run_dirs[0]) if run_dirs else "no run directory (interrupted before it existed)"
            print(f"sweep {index:2d}: {sig.name:7s} after {delay:5.1f} s -> exit {process.returncode}, {state}, "
                  f"engines left: {len(left)}", flush=True)
    print("\n".join(problems) if problems else f"all {args.sweeps} interrupted sweeps left nothing running")


if __name__ == "__main__":
    main()
