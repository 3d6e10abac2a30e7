"""How closely a replayed trace keeps its timestamps: begun - scheduled and sent - scheduled, per run and
as medians over runs.

Each run replays a fresh 200-request trace (Poisson, --rate requests/s, 1-4 output tokens) against the
scripted server (1 ms to first token, 1 ms per token) through the real runner. "Begun" is when the client
started the request (the schedule's own error); "sent" is when its body reached the socket (that plus
aiohttp's send delay). A machine shared with other work shows in the tail, hence the medians.

    python benchmarks/trace_schedule.py [--runs 7] [--rate 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen.arrivals import Level  # noqa: E402
from loadgen.client import ClientOptions  # noqa: E402
from loadgen.datasets import iter_requests  # noqa: E402
from loadgen.recorder import JsonlWriter, read_records  # noqa: E402
from loadgen.replay.formats import read_dataset  # noqa: E402
from loadgen.replay.requests import prepare_replay, replay_requests  # noqa: E402
from loadgen.runner import LevelBounds, LevelContext, run_level_blocking  # noqa: E402
from loadgen.workload import DatasetSettings, LengthDistribution, Workload  # noqa: E402
from tests.servers import scripted_server  # noqa: E402


def one_run(base_url: str, rate: float, seed: int, directory: Path) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    times_ms = np.cumsum(rng.exponential(1000.0 / rate, size=200))
    path = directory / f"trace-{seed}.jsonl"
    path.write_text("".join(json.dumps({"timestamp": float(t), "input_length": 32, "output_length":
                                        int(rng.integers(1, 5)), "hash_ids": [int(i)]}) + "\n"
                            for i, t in enumerate(times_ms)))
    replay = prepare_replay(read_dataset(path), DatasetSettings(path=str(path), block_tokens=16),
                            LengthDistribution(value=4), seed=0)
    records_path = directory / f"records-{seed}.jsonl"
    with JsonlWriter(records_path) as writer:
        ctx = LevelContext("bench", "scripted", Level("trace", 1.0), ClientOptions(base_url, "scripted"), writer)
        run_level_blocking(ctx, LevelBounds(duration_s=replay.span_s), replay_requests(replay, "chat", cycle=False),
                           iter_requests(Workload(input_tokens=LengthDistribution(value=8))))
    measured = [r for r in read_records(records_path) if not r.is_warmup]
    begun = np.array([(r.dispatch_s - r.scheduled_s) * 1000 for r in measured])
    sent = np.array([(r.send_s - r.scheduled_s) * 1000 for r in measured])
    return begun, sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--rate", type=float, default=100.0)
    args = parser.parse_args()
    rows = []
    with scripted_server() as server, tempfile.TemporaryDirectory() as tmp:
        server.set_script(ttft_ms=1, itl_ms=1)
        for seed in range(args.runs):
            begun, sent = one_run(server.base_url, args.rate, seed, Path(tmp))
            row = [*np.percentile(begun, [50, 99]), *np.percentile(sent, [50, 99])]
            rows.append(row)
            print(f"run {seed + 1}: begun - scheduled p50 {row[0]:.3f} p99 {row[1]:.3f} ms; "
                  f"sent - scheduled p50 {row[2]:.3f} p99 {row[3]:.3f} ms")
    medians = [statistics.median(column) for column in zip(*rows, strict=True)]
    print(f"median of {args.runs} runs at {args.rate:g} requests/s: begun - scheduled p50 {medians[0]:.3f} "
          f"p99 {medians[1]:.3f} ms; sent - scheduled p50 {medians[2]:.3f} p99 {medians[3]:.3f} ms")


if __name__ == "__main__":
    main()
