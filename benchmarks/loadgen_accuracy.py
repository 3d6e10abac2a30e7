"""Measured vs true timing: the load generator against a server whose timing is known.

The scripted server (its own process, pinned to its own core where there is one) answers every request
with the first token after TTFT and one token every ITL after it. A client that measures right reports
those values back at every concurrency; the true output rate of N users is N * tokens / (ttft + (tokens -
1) * itl). Prints each figure, the truth and the error, and the tolerance it is held to; beside it, what
the server really did (`GET /_sent`: on one core it writes chunks due together one after another, so at
high concurrency it is itself late), and the client's error against that. Usage:

    python benchmarks/loadgen_accuracy.py [--levels 1,8,50,256] [--duration 8]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import httpx

from benchmarks._servers import scripted_server
from loadgen.arrivals import Level
from loadgen.client import ClientOptions
from loadgen.datasets import iter_requests
from loadgen.metrics import summarize
from loadgen.recorder import JsonlWriter, read_records
from loadgen.runner import LevelBounds, LevelContext, run_level_blocking
from loadgen.types import LevelSummary
from loadgen.workload import LengthDistribution, Workload

TTFT_MS, ITL_MS, TOKENS = 100.0, 20.0, 128


def tolerances(concurrency: int) -> dict[str, tuple[str, float]]:
    """(kind, bound) per figure: 'abs' in ms or 'rel' as a fraction. 256 users tick in the same few ms."""
    wide = concurrency >= 256
    return {
        "ttft p50": ("abs", 3.0 if wide else 2.0),
        "itl p50": ("rel", 0.02),
        "itl p99": ("rel", 0.15 if wide else 0.05),
        "output tokens/s": ("rel", 0.02),
    }


def measure(port: int, concurrency: int, duration_s: float) -> LevelSummary:
    workload = Workload(input_tokens=LengthDistribution(value=64), output_tokens=LengthDistribution(value=TOKENS))
    options = ClientOptions(f"http://127.0.0.1:{port}/v1", "scripted")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "requests.jsonl"
        with JsonlWriter(path) as writer:
            ctx = LevelContext("accuracy", "scripted", Level("concurrency", concurrency), options, writer)
            warmup = iter_requests(workload.model_copy(update={"seed": 1}))
            run = run_level_blocking(ctx, LevelBounds(duration_s=duration_s), iter_requests(workload), warmup)
        return summarize(read_records(path), client=run.client)


def server_sent(port: int) -> dict[str, Any]:
    """The scripted server's own record of when its chunks left, since the last call."""
    return httpx.get(f"http://127.0.0.1:{port}/_sent", timeout=10).json()


def report(concurrency: int, s: LevelSummary, sent: dict[str, Any]) -> bool:
    truth = {"ttft p50": TTFT_MS, "itl p50": ITL_MS, "itl p99": ITL_MS,
             "output tokens/s": concurrency * TOKENS / ((TTFT_MS + (TOKENS - 1) * ITL_MS) / 1000)}
    measured = {"ttft p50": s.latency.ttft_ms.p50, "itl p50": s.latency.itl_ms.p50, "itl p99": s.latency.itl_ms.p99,
                "output tokens/s": s.throughput.output_tokens_per_s}
    all_ok = True
    for name, (kind, bound) in tolerances(concurrency).items():
        value, true = measured[name] or float("nan"), truth[name]
        error = value - true if kind == "abs" else (value - true) / true
        ok = abs(error) <= bound
        all_ok &= ok
        shown = f"{error:+.2f} ms" if kind == "abs" else f"{error:+.2%}"
        limit = f"{bound:g} ms" if kind == "abs" else f"{bound:.0%}"
        actual = {"ttft p50": sent["ttft_ms"]["p50"], "itl p50": sent["itl_ms"]["p50"],
                  "itl p99": sent["itl_ms"]["p99"]}.get(name)
        versus_sent = ""
        if actual is not None:
            client_error = value - actual if kind == "abs" else (value - actual) / actual
            versus_sent = (f"  | server sent {actual:8.2f}, client error "
                           + (f"{client_error:+.2f} ms" if kind == "abs" else f"{client_error:+.2%}"))
        print(f"  c={concurrency:<4d} {name:16s} measured {value:10.2f}  true {true:10.2f}  error {shown:>9s}"
              f"  (within {limit}: {'yes' if ok else 'NO'}){versus_sent}")
    client = s.client.check
    assert client is not None
    print(f"  c={concurrency:<4d} held {s.throughput.mean_in_flight:.1f} in flight, "
          f"client cpu {client.client_cpu_fraction:.0%}, "
          f"loop lag p99 {client.loop_lag_p99_ms:.1f} ms, send delay p50 {s.latency.send_delay_ms.p50:.2f} ms, "
          f"failed {s.requests.num_failed}", flush=True)
    return all_ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--levels", default="1,8,50,256")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--port", type=int, default=8021)
    args = parser.parse_args()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    with scripted_server(args.port, ["--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)]):
        results = []
        for concurrency in (int(v) for v in args.levels.split(",")):
            server_sent(args.port)  # clears what earlier levels left
            summary = measure(args.port, concurrency, args.duration)
            results.append(report(concurrency, summary, server_sent(args.port)))
    print("all within tolerance" if all(results) else "SOME FIGURES OUT OF TOLERANCE")


if __name__ == "__main__":
    main()
