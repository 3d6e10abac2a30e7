"""What each extra LoRA adapter costs the reference engine at the same load: throughput and TTFT with 1, 4 and 16
adapters sharing its batches, against the base model alone.

It writes random adapters for the shipped model (`bench lora make`, rank 16 on q_proj and v_proj), then runs
`bench sweep --adapters-dir ... --adapter-counts 1,4,16 --concurrency 16` exactly as a user types it: each round
runs the base model alone and every count in turn, so they are measured side by side, and the figures are the
medians over the rounds (`--repeats`). Usage:

    python benchmarks/lora_adapters.py [--counts 1,4,16] [--users 16] [--duration 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

BENCH = [sys.executable, "-m", "bench"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="1,4,16")
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="default")
    parser.add_argument("--rank", type=int, default=16)
    args = parser.parse_args()
    most = max(int(c) for c in args.counts.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        adapters, runs = Path(tmp) / "adapters", Path(tmp) / "runs"
        subprocess.run([*BENCH, "lora", "make", "--base", args.model, "--rank", str(args.rank), "--count", str(most),
                        "--out", str(adapters)], check=True)
        sweep = [*BENCH, "sweep", "--model", args.model, "--adapters-dir", str(adapters), "--adapter-counts",
                 args.counts, "--concurrency", str(args.users), "--duration", str(args.duration), "--repeats",
                 str(args.repeats), "--input-tokens", "128", "--output-tokens", "64", "--no-report", "--out", str(runs)]
        print("$", " ".join(sweep[2:]), flush=True)
        subprocess.run(sweep, check=True, stdout=subprocess.DEVNULL)
        (run_dir,) = [path for path in runs.iterdir() if not path.name.startswith(".")]  # not bench's .history
        rows = json.loads((run_dir / "summary.json").read_text())
    by_count: dict[int, list[dict]] = defaultdict(list)
    for row in rows:
        by_count[int(row["base_level"].partition("+a")[2])].append(row)

    def median(count: int, key: str, stat: str | None = None) -> float:
        return statistics.median(r[key][stat] if stat else r[key] for r in by_count[count])

    base_out, base_ttft = median(0, "output_tokens_per_s"), median(0, "ttft_ms", "p95")
    print(f"\nreference engine, {args.model}, {args.users} users, 128 in / 64 out, rank {args.rank} on q_proj,v_proj; "
          f"medians of {args.repeats} rounds of {args.duration:g} s levels")
    print(f"{'adapters':>10} {'out tok/s':>10} {'x base':>7} {'TTFT p50 ms':>12} {'TTFT p95 ms':>12} {'x base':>7} "
          f"{'TPOT p50 ms':>12}")
    for count in sorted(by_count):
        out, ttft = median(count, "output_tokens_per_s"), median(count, "ttft_ms", "p95")
        print(f"{count or 'base':>10} {out:>10.1f} {out / base_out:>7.2f} {median(count, 'ttft_ms', 'p50'):>12.0f} "
              f"{ttft:>12.0f} {ttft / base_ttft:>7.2f} {median(count, 'tpot_ms', 'p50'):>12.1f}")


if __name__ == "__main__":
    main()
