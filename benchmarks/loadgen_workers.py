"""One client process vs client workers vs Ray actors, against a server whose timing is known.

The scripted server (its own process, pinned to the last core) answers with the first token after TTFT and
one every ITL after it. Each client mode runs the same level; printed side by side: each figure's error
against the programmed truth (and the tolerance `loadgen_accuracy` holds it to), the concurrency held, the
client CPU of each process, the workers' start-up, and how late the server itself was (its `/_sent`).
Each figure is the median over the repeats. Ray needs this script run with the Python of an environment
that has ray (e.g. $BENCH_RAY/bin/python, with PYTHONPATH at this repository) and a cluster's address.
Usage:

    python benchmarks/loadgen_workers.py [--users 256,1000] [--workers 2] [--ray 127.0.0.1:6379]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks._servers import scripted_server
from benchmarks.loadgen_accuracy import ITL_MS, TOKENS, TTFT_MS, server_sent, tolerances
from loadgen.arrivals import Level
from loadgen.client import ClientOptions
from loadgen.columns import columns_of
from loadgen.datasets import iter_requests
from loadgen.metrics import summarize_columns
from loadgen.pool import ClientPool, run_split_level
from loadgen.recorder import JsonlWriter, read_records
from loadgen.runner import LevelBounds, LevelContext, run_level_blocking
from loadgen.workload import LengthDistribution, Workload


@dataclass(frozen=True)
class Outcome:
    errors: dict[str, float]  # figure -> error (ms for abs figures, a fraction for rel ones)
    in_flight: float
    cpu: tuple[float, ...]  # each client process's CPU fraction
    start_s: float  # the slowest worker's start-up
    lag_p99_ms: float  # the worst event-loop lag p99
    server_late_ms: float  # the server's own ITL p99 minus the programmed ITL
    valid: bool


def measure(port: int, users: int, duration_s: float, pool: ClientPool | None) -> Outcome:
    workload = Workload(input_tokens=LengthDistribution(value=64), output_tokens=LengthDistribution(value=TOKENS))
    options = ClientOptions(f"http://127.0.0.1:{port}/v1", "scripted")
    level, bounds = Level("concurrency", users), LevelBounds(duration_s=duration_s)
    server_sent(port)  # clears what earlier levels left
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "requests.jsonl"
        with JsonlWriter(path) as writer:
            ctx = LevelContext("workers", "scripted", level, options, writer)
            warmup = iter_requests(workload.model_copy(update={"seed": 1}))
            if pool is None:
                run, workers = run_level_blocking(ctx, bounds, iter_requests(workload), warmup), []
            else:
                run = run_split_level(ctx, bounds, iter_requests(workload), warmup, pool).level_run
                workers = run.workers
        columns = columns_of(read_records(path))
        assert columns is not None
        s = summarize_columns(columns, client=run.client, workers=workers)
    sent = server_sent(port)
    truth = {"ttft p50": TTFT_MS, "itl p50": ITL_MS, "itl p99": ITL_MS,
             "output tokens/s": users * TOKENS / ((TTFT_MS + (TOKENS - 1) * ITL_MS) / 1000)}
    measured = {"ttft p50": s.latency.ttft_ms.p50, "itl p50": s.latency.itl_ms.p50, "itl p99": s.latency.itl_ms.p99,
                "output tokens/s": s.throughput.output_tokens_per_s}
    errors = {}
    for name, (kind, _) in tolerances(users).items():
        value = measured[name] or float("nan")
        errors[name] = value - truth[name] if kind == "abs" else (value - truth[name]) / truth[name]
    checks = [w.client for w in workers] or [run.client]
    return Outcome(errors, s.throughput.mean_in_flight, tuple(c.client_cpu_fraction for c in checks),
                   max((w.start_s for w in workers), default=0.0), max(c.loop_lag_p99_ms for c in checks),
                   sent["itl_ms"]["p99"] - ITL_MS, s.is_valid)


def summarize(name: str, users: int, outcomes: list[Outcome]) -> bool:
    """One line per mode: each figure's median error and whether it is within the tolerance."""
    held = all(abs(statistics.median(o.errors[f] for o in outcomes)) <= bound
               for f, (_, bound) in tolerances(users).items())
    in_flight = statistics.median(o.in_flight for o in outcomes)
    held &= in_flight >= 0.9 * users and all(o.valid for o in outcomes)
    parts = []
    for figure, (kind, bound) in tolerances(users).items():
        error = statistics.median(o.errors[figure] for o in outcomes)
        shown = f"{error:+.2f} ms" if kind == "abs" else f"{error:+.1%}"
        parts.append(f"{figure} {shown}{'' if abs(error) <= bound else '!'}")
    cpu = [statistics.median(o.cpu[i] for o in outcomes) for i in range(len(outcomes[0].cpu))]
    lag = statistics.median(o.lag_p99_ms for o in outcomes)
    print(f"  {name:22s} u={users:<5d} {'  '.join(parts)}  held {in_flight:6.1f}  "
          f"cpu {'/'.join(f'{c:.0%}' for c in cpu)}  lag p99 {lag:5.1f} ms"
          f"  start {statistics.median(o.start_s for o in outcomes):4.2f} s  "
          f"server late p99 {statistics.median(o.server_late_ms for o in outcomes):+5.1f} ms  "
          f"-> {'holds' if held else 'does NOT hold'}", flush=True)
    return held


@contextlib.contextmanager
def modes(workers: int, ray: str | None, chosen: set[str]) -> Iterator[list[tuple[str, ClientPool | None]]]:
    listed: list[tuple[str, ClientPool | None]] = [("one process", None)] if "one" in chosen else []
    listed += [(f"{workers} local workers", ClientPool(workers))] if "local" in chosen else []
    if ray is None or "ray" not in chosen:
        yield listed
        return
    pool = ClientPool(workers, ray)
    with pool.session():
        yield [*listed, (f"{workers} Ray actors", pool)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", default="256,1000")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ray", default=None, help="a Ray cluster's address: adds the Ray mode")
    parser.add_argument("--modes", default="one,local,ray", help="which of one, local, ray to run")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--port", type=int, default=8023)
    args = parser.parse_args()
    with scripted_server(args.port, ["--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)]):
        print(f"TTFT {TTFT_MS:g} ms, ITL {ITL_MS:g} ms, {TOKENS} tokens, {args.duration:g} s levels, "
              f"median of {args.repeats}; errors against the programmed truth ('!' past the tolerance)")
        with modes(args.workers, args.ray, set(args.modes.split(","))) as listed:
            for users in (int(v) for v in args.users.split(",")):
                for name, pool in listed:
                    outcomes = []
                    for _ in range(args.repeats):
                        outcomes.append(measure(args.port, users, args.duration, pool))
                        time.sleep(1.0)  # the server's sockets settle between levels
                    summarize(name, users, outcomes)


if __name__ == "__main__":
    main()
