"""How fast can the load generator go? Streamed tokens/s and requests/s on one core.

The client runs pinned to one core against the scripted server (pinned to another core where there is
one) in its instant mode: every answer is written at once, so the only limit left is the client.
Each figure is the median of several repeats. Usage:

    python benchmarks/loadgen_ceiling.py [--repeats 3] [--duration 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from benchmarks._servers import scripted_server
from loadgen.arrivals import Level
from loadgen.client import ClientOptions
from loadgen.datasets import iter_requests
from loadgen.metrics import summarize
from loadgen.recorder import JsonlWriter, read_records
from loadgen.runner import LevelBounds, LevelContext, run_level_blocking
from loadgen.workload import LengthDistribution, Workload

CASES = [  # (name, concurrency, output tokens per request)
    ("tokens/s, 1024-token streams", 64, 1024),
    ("requests/s, 8-token streams", 64, 8),
    ("concurrency 256, 256-token streams", 256, 256),
]


def measure(port: int, concurrency: int, output_tokens: int, duration_s: float) -> tuple[float, ...]:
    lengths = {"input_tokens": LengthDistribution(value=32), "output_tokens": LengthDistribution(value=output_tokens)}
    workload = Workload(**lengths)
    options = ClientOptions(f"http://127.0.0.1:{port}/v1", "scripted")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "requests.jsonl"
        with JsonlWriter(path) as writer:
            ctx = LevelContext("ceiling", "scripted", Level("concurrency", concurrency), options, writer)
            run = run_level_blocking(ctx, LevelBounds(duration_s=duration_s), iter_requests(workload),
                                  iter_requests(workload))
        summary = summarize(read_records(path), client=run.client)
    return (summary.throughput.output_tokens_per_s, summary.throughput.request_per_s, summary.throughput.mean_in_flight,
            run.client.client_cpu_fraction, summary.requests.num_failed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--port", type=int, default=8019)
    args = parser.parse_args()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # the client gets exactly one core
    with scripted_server(args.port):
        for name, concurrency, output_tokens in CASES:
            runs = [measure(args.port, concurrency, output_tokens, args.duration)
                    for _ in range(args.repeats)]
            tokens, requests, held, cpu, failed = (statistics.median(column) for column in zip(*runs, strict=True))
            print(f"{name:38s} c={concurrency:<4d} {tokens:10.0f} tokens/s {requests:8.0f} requests/s "
                  f"held {held:6.1f} in flight  client cpu {cpu:4.0%}  failed {failed:.0f}  "
                  f"(median of {args.repeats})", flush=True)


if __name__ == "__main__":
    main()
