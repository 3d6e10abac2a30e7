"""What one client's stop list costs everyone else: a normal stream's median inter-token latency on the reference
engine (a) alone, (b) beside a benign stream of the same length, (c) beside the most hostile stop list the
server's limits still take (--max-stop-strings x --max-stop-chars, `ignore_eos`, a long max_tokens).

The engine runs as a child process on 127.0.0.1 (SmolLM2-135M by default). Each neighbour stream starts first and
runs a while before the measured stream starts, so its text is long when measured; the three settings take turns,
round after round, and each figure is the median over the rounds of each round's median gap between chunks.
The goal: c within 1.5x of a. Usage:

    python benchmarks/hostile_stop.py [--model default] [--rounds 3] [--tokens 150]
    python benchmarks/hostile_stop.py --source OLD_CHECKOUT --stop-chars 1024   # the same attack, an older engine
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import aiohttp

from benchmarks._servers import ready_engine

ROOT = Path(__file__).resolve().parent.parent
# 16 characters the model writes often: each stop string is one of them repeated, so partial matches are common
STOP_CHARS = " etaoinsrhldcu.\n"
PROMPT = "Write a long story about a lighthouse keeper and the sea, with many details."


def hostile_stops(count: int, length: int) -> list[str]:
    return [STOP_CHARS[i % len(STOP_CHARS)] * length for i in range(count)]


async def stream_gaps_s(session: aiohttp.ClientSession, url: str, body: dict, started: asyncio.Event | None = None,
                        warm_chunks: int = 0) -> list[float]:  # fmt: skip
    """Stream one completion; the gaps between its chunks. `started` is set after `warm_chunks` chunks."""
    arrivals: list[float] = []
    async with session.post(url, json={**body, "stream": True}) as response:
        response.raise_for_status()
        async for line in response.content:
            if line.startswith(b"data: {"):
                arrivals.append(time.perf_counter())
                if started is not None and len(arrivals) == warm_chunks:
                    started.set()
    return [later - earlier for earlier, later in zip(arrivals, arrivals[1:], strict=False)]


async def measure(url: str, tokens: int, neighbour: dict | None, warm_chunks: int) -> float:
    """The measured stream's median gap, in ms, alone or beside `neighbour` (which has streamed `warm_chunks`)."""
    body = {"prompt": PROMPT, "max_tokens": tokens, "ignore_eos": True, "temperature": 0}
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        if neighbour is None:
            gaps = await stream_gaps_s(session, url, body)
        else:
            started = asyncio.Event()
            other = asyncio.create_task(stream_gaps_s(session, url, neighbour, started, warm_chunks))
            waiting = asyncio.create_task(started.wait())
            await asyncio.wait({other, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if not started.is_set():  # the neighbour failed or ended first: say why
                waiting.cancel()
                other.result()
                raise SystemExit(f"the neighbour stream ended before {warm_chunks} chunks")
            gaps = await stream_gaps_s(session, url, body)
            other.cancel()  # the connection closes: the server aborts it
            await asyncio.gather(other, return_exceptions=True)
    return 1000 * statistics.median(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=150, help="the measured stream's length")
    parser.add_argument("--warm-chunks", type=int, default=100, help="the neighbour's chunks before measuring")
    parser.add_argument("--stop-strings", type=int, default=16, help="the server's --max-stop-strings")
    parser.add_argument("--stop-chars", type=int, default=1024, help="the server's --max-stop-chars")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--source", type=Path, default=ROOT, help="the checkout the engine is run from")
    args = parser.parse_args()
    long = args.max_model_len // 2  # the neighbour outlasts the measured stream, and its prompt fits beside it
    benign = {"prompt": PROMPT, "max_tokens": long, "ignore_eos": True, "temperature": 0}
    hostile = {**benign, "stop": hostile_stops(args.stop_strings, args.stop_chars)}
    settings = {"a alone": None, "b beside benign": benign, "c beside hostile": hostile}
    command = [sys.executable, "-m", "engines.reference", "--model", args.model, "--host", "127.0.0.1", "--port", "0",
               "--max-model-len", str(args.max_model_len)]  # fmt: skip
    results: dict[str, list[float]] = {name: [] for name in settings}
    with ready_engine(command, cwd=args.source) as base_url:
        url = base_url + "/completions"
        asyncio.run(measure(url, 16, None, 0))  # warm-up
        for round_index in range(args.rounds):
            for name, neighbour in settings.items():
                results[name].append(asyncio.run(measure(url, args.tokens, neighbour, args.warm_chunks)))
            figures = ", ".join(f"{name} {values[-1]:.1f} ms" for name, values in results.items())
            print(f"round {round_index + 1}: {figures}", flush=True)
    a, b, c = (statistics.median(values) for values in results.values())
    print(f"\nreference engine ({args.model}) from {args.source}; stop list {args.stop_strings} x {args.stop_chars} "
          f"characters; median inter-token latency of a {args.tokens}-token stream, medians of {args.rounds} rounds:")
    print(json.dumps({"a_alone_ms": round(a, 1), "b_beside_benign_ms": round(b, 1), "c_beside_hostile_ms": round(c, 1),
                      "c_over_a": round(c / a, 2), "c_over_b": round(c / b, 2)}))  # fmt: skip


if __name__ == "__main__":
    main()
