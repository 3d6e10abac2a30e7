"""A provider as it streams and limits: reasoning before the answer, and a rate limit, measured.

1. Reasoning: the scripted server (its own process) sends its first token after TTFT, then one every ITL,
   the first R of them as `reasoning_content`. The true TTFT is TTFT, the true time to the first visible
   token TTFT + R x ITL; prints both as measured at each level of users, with the error.
2. Throttling: the server takes `--limit` requests/s (a token bucket one second deep) and answers the rest
   429 with Retry-After. An open-loop sweep with throttled requests failing (`--on-throttle fail`) shows the
   throttle rate and the accepted rate at each offered rate: the accepted rate stops at the limit.

    python benchmarks/provider_side.py [--users 1,8,50] [--rates 5,10,20] [--limit 10] [--duration 6]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

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

TTFT_MS, ITL_MS, REASONING_TOKENS, OUTPUT_TOKENS = 100.0, 20.0, 32, 64


def measure(port: int, level: Level, bounds: LevelBounds, options: dict[str, object]) -> LevelSummary:
    workload = Workload(input_tokens=LengthDistribution(value=64),
                        output_tokens=LengthDistribution(value=OUTPUT_TOKENS))
    client = ClientOptions(f"http://127.0.0.1:{port}/v1", "scripted", **options)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "requests.jsonl"
        with JsonlWriter(path) as writer:
            ctx = LevelContext("provider", "scripted", level, client, writer)
            run = run_level_blocking(ctx, bounds, iter_requests(workload), iter_requests(workload))
        return summarize(read_records(path), client=run.client)


def reasoning(port: int, users: list[int], duration_s: float) -> None:
    script = {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "reasoning_tokens": REASONING_TOKENS}
    httpx.put(f"http://127.0.0.1:{port}/_script", json=script).raise_for_status()
    visible = TTFT_MS + REASONING_TOKENS * ITL_MS
    print(f"reasoning: TTFT {TTFT_MS:g} ms, {ITL_MS:g} ms a token, {REASONING_TOKENS} reasoning tokens of "
          f"{OUTPUT_TOKENS}: true TTFVT {visible:g} ms")
    print(f"{'users':>6} {'requests':>9} {'TTFT p50':>9} {'error':>7} {'TTFVT p50':>10} {'error':>7} {'reasoning':>10}")
    for n in users:
        s = measure(port, Level("concurrency", n), LevelBounds(duration_s=duration_s), {})
        ttft, ttfvt = s.latency.ttft_ms.p50 or 0.0, s.latency.ttfvt_ms.p50 or 0.0
        print(f"{n:>6} {s.requests.num_ok:>9} {ttft:>9.2f} {ttft - TTFT_MS:>+7.2f} {ttfvt:>10.2f} "
              f"{ttfvt - visible:>+7.2f} "
              f"{s.tokens.usage.reasoning_share or 0:>10.0%}")


def throttling(port: int, rates: list[float], limit: float, duration_s: float) -> None:
    script = {"ttft_ms": 20.0, "itl_ms": 2.0, "rate_limit_per_s": limit, "rate_limit_burst": limit}
    httpx.put(f"http://127.0.0.1:{port}/_script", json=script).raise_for_status()
    print(f"\nthrottling: the server takes {limit:g} requests/s (a bucket of {limit:g}); throttled requests fail")
    print(f"{'offered':>8} {'sent':>6} {'ok':>5} {'throttled':>10} {'accepted req/s':>15}")
    for rate in rates:
        s = measure(port, Level("rate", rate), LevelBounds(duration_s=duration_s, num_warmup=0),
                    {"on_throttle": "fail"})
        accepted = s.requests.num_ok / duration_s
        counts = s.requests
        print(f"{rate:>8g} {counts.num_requests:>6} {counts.num_ok:>5} {counts.throttle_rate:>10.0%} {accepted:>15.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", default="1,8,50")
    parser.add_argument("--rates", default="5,10,20")
    parser.add_argument("--limit", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--port", type=int, default=8013)
    args = parser.parse_args()
    with scripted_server(args.port, ["--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)]):
        reasoning(args.port, [int(u) for u in args.users.split(",")], args.duration)
        throttling(args.port, [float(r) for r in args.rates.split(",")], args.limit, args.duration)


if __name__ == "__main__":
    main()
