"""Summaries in bounded memory: a level of many synthetic records summarized as `bench summarize` does it,
its peak memory and time, and its figures against another revision's summarizer on the same records.

Writes `--records` records of `--tokens` tokens each (one level of 256 users, streamed at 20 ms a token,
some throttled and retried, some failed) into a run directory, then, each in a fresh process:
  - this checkout's `bench.run.rundir.summarize_run` (columns read a row at a time);
  - with `--against REV`, the summarizer of that git revision (`loadgen/metrics.py` as it was there, fed
    the records as that revision read them), and every figure of the two summaries compared.

    python benchmarks/summarize_memory.py [--records 1000000] [--tokens 64] [--against 3c41d1d]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
USERS = 256


def write_run(run_dir: Path, num_records: int, tokens: int, seed: int = 0) -> None:
    """One closed-loop level of 256 users: each user's requests back to back, times in seconds."""
    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_dir.name, "status": "complete",
                                                  "engine": {"name": "synthetic"}, "levels": ["c256"]}))
    clock = np.zeros(USERS)
    with (run_dir / "requests.jsonl").open("wb") as f:
        for i in range(num_records):
            user = i % USERS
            ttft = 0.1 + rng.exponential(0.05)
            times = (ttft + np.arange(tokens) * 0.02 + rng.normal(0, 0.001, tokens).cumsum().clip(-0.01)).tolist()
            send = float(clock[user])
            ok = i % 97 != 0
            throttled = i % 31 == 0
            row = {"run_id": run_dir.name, "engine": "synthetic", "level": "c256", "request_id": i, "send_s": send,
                   "dispatch_s": send - 0.0003, "user": user, "is_warmup": i < USERS,
                   "chunk_times_s": times if ok else times[:3], "chunk_tokens": [1] * (tokens if ok else 3),
                   "end_s": send + times[-1], "prompt_tokens": 256, "output_tokens": tokens if ok else 3,
                   "cached_tokens": 64 if i % 3 == 0 else None, "server_output_tokens": tokens if ok else None,
                   "token_count_source": "server_usage_deltas", "max_tokens": tokens, "ok": ok,
                   "error_kind": None if ok else "stream_error", "attempts": 2 if throttled else 1,
                   "throttled_attempts": 1 if throttled else 0, "first_send_s": send - 0.5 if throttled else None,
                   "connect_ms": 0.4 if i < USERS * 2 else None}
            f.write(orjson.dumps(row) + b"\n")
            clock[user] = send + times[-1] + 0.001


CURRENT = """
import json, sys, time
from pathlib import Path
from dataclasses import asdict
start = time.perf_counter()
from bench.run.rundir import summarize_run
summaries = summarize_run(Path(sys.argv[1]))
seconds = time.perf_counter() - start
import resource
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "peak_mb": peak_mb, "summaries": [s.to_json() for s in summaries]}))
"""

# Another revision's summarizer, as it was: its metrics module loaded from git, fed the records it read.
AGAINST = """
import json, sys, time, types
from pathlib import Path
from dataclasses import asdict
source = sys.stdin.read()
module = types.ModuleType("metrics_then")
sys.modules["metrics_then"] = module  # its dataclasses look their module up
exec(compile(source, "metrics_then", "exec"), module.__dict__)
start = time.perf_counter()
from loadgen.recorder import read_records
records = [r for r in read_records(Path(sys.argv[1]) / "requests.jsonl")]
summary = module.summarize(records)
seconds = time.perf_counter() - start
import resource
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "peak_mb": peak_mb, "summaries": [summary.to_json()]}))
"""


def measure(script: str, run_dir: Path, stdin: str | None = None) -> dict:
    """Run `script` in a fresh process: its summaries, its seconds and its own peak resident memory (MB)."""
    done = subprocess.run([sys.executable, "-c", script, str(run_dir)], input=stdin, capture_output=True, text=True,
                          check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(done.stdout)


def differences(a: dict, b: dict, path: str = "") -> list[str]:
    """Every figure that is not exactly equal, by its path in the summary."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in sorted(set(a) | set(b)) for d in differences(a.get(key), b.get(key), f"{path}.{key}")]
    same = a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)  # NaN == NaN here
    return [] if same else [f"{path}: {a!r} vs {b!r}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--against", help="a git revision whose summarizer to compare with (e.g. 3c41d1d)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder) / "run"
        started = time.perf_counter()
        write_run(run_dir, args.records, args.tokens)
        size_mb = (run_dir / "requests.jsonl").stat().st_size / 1e6
        print(f"{args.records:,} records of {args.tokens} tokens: {size_mb:,.0f} MB of JSONL, written in "
              f"{time.perf_counter() - started:.1f} s")
        now = measure(CURRENT, run_dir)
        print(f"summarize_run (columns): {now['seconds']:.1f} s, peak {now['peak_mb']:,.0f} MB "
              f"({now['peak_mb'] * 1e6 / args.records:,.0f} bytes a record)")
        if args.against:
            source = subprocess.run(["git", "show", f"{args.against}:loadgen/metrics.py"], capture_output=True,
                                    text=True, check=True, cwd=ROOT).stdout
            then = measure(AGAINST, run_dir, source)
            print(f"{args.against}'s summarizer (records): {then['seconds']:.1f} s, peak {then['peak_mb']:,.0f} MB")
            diff = differences(now["summaries"][0], then["summaries"][0])
            print("figures: exactly equal" if not diff else f"figures differ in {len(diff)}:\n  " + "\n  ".join(diff))


if __name__ == "__main__":
    main()
