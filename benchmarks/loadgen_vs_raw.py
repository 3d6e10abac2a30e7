"""`bench sweep` beside a bare socket client, on one core each, against a server whose timing is known.

The scripted server (TTFT 100 ms, ITL 20 ms, 128 tokens) runs pinned to the last core; each client runs in
a process of its own pinned to the first: `bench sweep` exactly as a user types it, and
`benchmarks/raw_client.py`, the floor. They take turns at every level and repeat, and each figure is the
median over the repeats. Errors are against what the server says it really sent (`GET /_sent`: on one
core it writes chunks due together one after another, so at 1,000 users it is itself a little late), the
programmed truth in brackets. Usage:

    python benchmarks/loadgen_vs_raw.py [--levels 1,8,50,256,1000] [--repeats 3] [--duration 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.loadgen_ceiling import start_server

TTFT_MS, ITL_MS, TOKENS, PROMPT_TOKENS = 100.0, 20.0, 128, 64


@dataclass(frozen=True)
class Figures:
    """One client's run of one level, beside what the server sent meanwhile."""

    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p99_ms: float
    in_flight: float
    loop_lag_p99_ms: float
    cpu_s_per_1k_tokens: float
    sent_ttft_p50_ms: float
    sent_ttft_p99_ms: float
    sent_itl_p99_ms: float
    is_valid: bool


def client_core() -> str:
    return str(sorted(os.sched_getaffinity(0))[0])


def run_bench(port: int, users: int, duration_s: float) -> tuple[dict[str, Any], float]:
    """`bench sweep` against the server: its level's summary, and its CPU seconds per 1k measured tokens."""
    with tempfile.TemporaryDirectory() as out:
        command = ["taskset", "-c", client_core(), sys.executable, "-m", "bench", "sweep", "--engine", "endpoint",
                   "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "scripted", "--concurrency", str(users),
                   "--duration", str(duration_s), "--output-tokens", str(TOKENS), "--input-tokens",
                   str(PROMPT_TOKENS), "--no-report", "--out", out]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run_dir = next(Path(out).iterdir())
        summary = json.loads((run_dir / "summary.json").read_text())[0]
        level = json.loads((run_dir / "levels.jsonl").read_text().splitlines()[0])
        tokens = sum(row["output_tokens"] for row in map(json.loads, (run_dir / "requests.jsonl").open())
                     if not row["is_warmup"])
        cpu_s = level["client"]["client_cpu_fraction"] * level["wall_s"]
        return summary, cpu_s / tokens * 1000


def run_raw(port: int, users: int, duration_s: float) -> tuple[dict[str, Any], float]:
    command = ["taskset", "-c", client_core(), sys.executable, "-m", "benchmarks.raw_client", "--port", str(port),
               "--users", str(users), "--duration", str(duration_s), "--json"]
    raw = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    return raw["summary"], raw["cpu_s"] / raw["num_tokens"] * 1000


def measure(client: str, port: int, users: int, duration_s: float) -> Figures:
    httpx.get(f"http://127.0.0.1:{port}/_sent", timeout=10)  # clears what earlier runs left
    summary, cpu_per_1k = (run_bench if client == "bench" else run_raw)(port, users, duration_s)
    sent = httpx.get(f"http://127.0.0.1:{port}/_sent", timeout=10).json()
    return Figures(
        ttft_p50_ms=summary["ttft_ms"]["p50"], ttft_p99_ms=summary["ttft_ms"]["p99"],
        itl_p99_ms=summary["itl_ms"]["p99"], in_flight=summary["mean_in_flight"],
        loop_lag_p99_ms=summary["client"]["loop_lag_p99_ms"], cpu_s_per_1k_tokens=cpu_per_1k,
        sent_ttft_p50_ms=sent["ttft_ms"]["p50"], sent_ttft_p99_ms=sent["ttft_ms"]["p99"],
        sent_itl_p99_ms=sent["itl_ms"]["p99"], is_valid=summary.get("is_valid", True),
    )


def median(runs: list[Figures], name: str) -> float:
    return statistics.median(getattr(run, name) for run in runs)


def show(users: int, client: str, runs: list[Figures], raw_cpu: float | None) -> None:
    def error(measured: str, sent: str, programmed: float, relative: bool) -> str:
        value, truth = median(runs, measured), median(runs, sent)
        if relative:
            return f"{(value - truth) / truth:+6.1%} [{(value - programmed) / programmed:+6.1%}]"
        return f"{value - truth:+6.2f} [{value - programmed:+6.2f}] ms"

    cpu = median(runs, "cpu_s_per_1k_tokens")
    versus = f" ({cpu / raw_cpu:.2f}x raw)" if raw_cpu else ""
    valid = sum(run.is_valid for run in runs)
    print(f"c={users:<5d} {client:5s} TTFT p50 {error('ttft_p50_ms', 'sent_ttft_p50_ms', TTFT_MS, False)}  "
          f"p99 {error('ttft_p99_ms', 'sent_ttft_p99_ms', TTFT_MS, True)}  "
          f"ITL p99 {error('itl_p99_ms', 'sent_itl_p99_ms', ITL_MS, True)}  "
          f"in flight {median(runs, 'in_flight'):7.1f}  lag p99 {median(runs, 'loop_lag_p99_ms'):5.2f} ms  "
          f"cpu {cpu * 1000:6.2f} ms/1k tokens{versus}  valid {valid}/{len(runs)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--levels", default="1,8,50,256,1000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--port", type=int, default=8023)
    args = parser.parse_args()
    server = start_server(args.port, ["--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)])
    try:
        print(f"errors against what the server sent [against the programmed TTFT {TTFT_MS:g} ms, ITL {ITL_MS:g} ms]; "
              f"medians of {args.repeats}")
        for users in (int(v) for v in args.levels.split(",")):
            runs: dict[str, list[Figures]] = {"raw": [], "bench": []}
            for repeat in range(args.repeats):
                order = ("raw", "bench") if repeat % 2 == 0 else ("bench", "raw")
                for client in order:
                    runs[client].append(measure(client, args.port, users, args.duration))
            show(users, "raw", runs["raw"], None)
            show(users, "bench", runs["bench"], median(runs["raw"], "cpu_s_per_1k_tokens"))
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
