"""Speculative decoding on the reference engine: prompt lookup (ngram) off and on, on the copy-heavy `edit`
workload and on `chat`, at one user and at sixteen, each measured as a user runs it (`bench sweep --scenario S
--concurrency 1,16`), the two configurations in turns within every round so they meet the same machine.

Prints, per workload, level and configuration, the medians over the rounds of output tokens/s, TPOT p50 and
p99 (ms), the client's tokens per chunk, and the server's acceptance rate and mean acceptance length (from
its spec_decode counters, as vLLM defines them). Usage:

    python benchmarks/speculative.py [--rounds 3] [--duration 30] [--tokens 4] [--scenarios edit,chat]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.inputs.hardware import cpu_model
from bench.run.rundir import read_run

BENCH = [sys.executable, "-m", "bench"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per level")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--tokens", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--scenarios", default="edit,chat")
    args = parser.parse_args()
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": args.tokens, "prompt_lookup_max": 4})
    configs = {"off": [], "ngram": [f"--engine-arg=speculative-config={spec}"]}
    rows: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            for scenario in args.scenarios.split(","):
                for name, flags in configs.items():
                    out = Path(tmp) / f"{scenario}-{name}-{round_index}"
                    for level, figures in _sweep(scenario, flags, out, args).items():
                        rows.setdefault((scenario, level, name), []).append(figures)
    _print(rows, args)


def _sweep(scenario: str, flags: list[str], out: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    command = [*BENCH, "sweep", "--scenario", scenario, "--concurrency", args.concurrency, "--duration",
               str(args.duration), "--no-report", "--out", str(out), *flags]
    print("$", " ".join(command[2:]), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    (run_dir,) = [p for p in out.iterdir() if (p / "summary.json").is_file()]
    run = read_run(run_dir)
    views = {view.level: view.spec for view in run.server_views}
    figures = {}
    for summary in run.summaries:
        spec = views.get(summary.level)
        figures[summary.level] = {
            "out tok/s": summary.throughput.output_tokens_per_s,
            "TPOT p50": summary.latency.tpot_ms.p50 or float("nan"),
            "TPOT p99": summary.latency.tpot_ms.p99 or float("nan"),
            "tok/chunk": summary.tokens.mean_tokens_per_chunk or float("nan"),
            "accepted": spec.acceptance_rate if spec and spec.acceptance_rate is not None else float("nan"),
            "accept len": spec.mean_acceptance_length if spec and spec.mean_acceptance_length else float("nan"),
        }
    return figures


def _print(rows: dict[tuple[str, str, str], list[dict[str, float]]], args: argparse.Namespace) -> None:
    print(f"\nreference engine, default model, {platform.machine()} ({cpu_model()}); "
          f"num_speculative_tokens {args.tokens}; medians of {args.rounds} rounds of {args.duration:g} s levels")
    labels = ["out tok/s", "TPOT p50", "TPOT p99", "tok/chunk", "accepted", "accept len"]
    print(f"{'workload':>8} {'level':>6} {'spec':>6} " + " ".join(f"{label:>10}" for label in labels)
          + f" {'x tok/s':>8}")
    for (scenario, level, name), found in sorted(rows.items(), key=lambda r: (r[0][0], int(r[0][1][1:]), r[0][2])):
        medians = {label: statistics.median(f[label] for f in found) for label in labels}
        off = rows.get((scenario, level, "off"))
        ratio = medians["out tok/s"] / statistics.median(f["out tok/s"] for f in off) if off else float("nan")
        print(f"{scenario:>8} {level:>6} {name:>6} " + " ".join(f"{medians[label]:>10,.2f}" for label in labels)
              + f" {ratio:>8.2f}")


if __name__ == "__main__":
    main()
