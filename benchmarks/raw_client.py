"""A bare streaming client, the floor to hold the load generator against: asyncio protocols on raw sockets.

Each user keeps one connection and sends one request after another. A socket read costs a clock read, a
byte count of the tokens it carried and a check for the end of the stream; nothing is parsed as JSON,
nothing decoded. Records are built only after the level, so `loadgen.metrics.summarize` computes every
figure exactly as it does for `bench`. It speaks just enough HTTP/1.1 for a server that answers with
chunked transfer and one token per `"content"` (the scripted server): a yardstick, not a client.

    python benchmarks/raw_client.py --port 8021 --users 1000 --duration 10 [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field

import orjson

from loadgen.metrics import summarize
from loadgen.runner import _client_check, _watch_loop_lag
from loadgen.types import LevelSummary, RequestRecord

TOKEN_MARK = b'"content":"'  # every chunk of generated text (the final chunk's delta is empty)
END_MARK = b"0\r\n\r\n"  # the chunked body's last chunk


@dataclass
class Exchange:
    """One request's raw times: sent, every read that carried tokens (with how many), ended."""

    sent_s: float
    reads: list[tuple[float, int]] = field(default_factory=list)
    ended_s: float = 0.0


class RawUser(asyncio.Protocol):
    """One user's connection: sends the next request as soon as the last answer ends."""

    def __init__(self, body: bytes, port: int, until_s: float, done: asyncio.Future[None]) -> None:
        head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n" \
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        self.request = head.encode() + body
        self.until_s, self.done = until_s, done
        self.exchanges: list[Exchange] = []
        self.transport: asyncio.Transport | None = None
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.send()

    def send(self) -> None:
        assert self.transport is not None
        self.transport.write(self.request)
        self.exchanges.append(Exchange(time.perf_counter()))

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        exchange = self.exchanges[-1]
        tokens = data.count(TOKEN_MARK)
        if tokens:
            exchange.reads.append((now, tokens))
        tail = (self.tail + data)[-len(END_MARK):]
        if tail != END_MARK:
            self.tail = tail
            return
        self.tail = b""
        exchange.ended_s = now
        if now < self.until_s:
            self.send()
        elif not self.done.done() and self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


def records(users: list[RawUser], origin_s: float) -> list[RequestRecord]:
    """Each finished exchange as a `RequestRecord` on the level's clock (0 = the measured start)."""
    out = []
    for user_index, user in enumerate(users):
        for exchange in user.exchanges:
            if not exchange.ended_s or not exchange.reads or exchange.sent_s < origin_s:
                continue
            times = [t - exchange.sent_s for t, count in exchange.reads for _ in range(count)]
            out.append(RequestRecord(
                run_id="raw", engine="raw", level=f"c{len(users)}", request_id=len(out), user=user_index,
                send_s=exchange.sent_s - origin_s, dispatch_s=exchange.sent_s - origin_s,
                end_s=exchange.ended_s - origin_s, chunk_times_s=times, chunk_tokens=[1] * len(times),
                output_tokens=len(times), ok=True,
            ))
    return out


@dataclass(frozen=True)
class RawRun:
    summary: LevelSummary
    cpu_s: float  # the whole run's, warm-up answers included
    num_tokens: int  # likewise


async def run(port: int, num_users: int, duration_s: float, output_tokens: int, prompt: str) -> RawRun:
    """One closed-loop level; the first answer of each user warms its connection and is not measured."""
    body = orjson.dumps({"model": "scripted", "messages": [{"role": "user", "content": prompt}],
                         "max_tokens": output_tokens, "stream": True, "ignore_eos": True,
                         "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    loop = asyncio.get_running_loop()
    origin_s = time.perf_counter()
    until_s = origin_s + duration_s
    users = []
    for _ in range(num_users):
        user = RawUser(body, port, until_s, loop.create_future())
        await loop.create_connection(lambda user=user: user, "127.0.0.1", port)
        users.append(user)
    lags: list[float] = []
    monitor = asyncio.create_task(_watch_loop_lag(lags))
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    await asyncio.gather(*(user.done for user in users))
    monitor.cancel()
    cpu_s, wall_s = time.process_time() - cpu_start, time.perf_counter() - wall_start
    warmed_s = max(user.exchanges[0].ended_s for user in users)  # every user past its first answer
    summary = summarize(records(users, warmed_s), client=_client_check(lags, cpu_s, wall_s))
    num_tokens = sum(count for user in users for exchange in user.exchanges for _, count in exchange.reads)
    return RawRun(summary, cpu_s, num_tokens)


def run_blocking(port: int, num_users: int, duration_s: float, output_tokens: int = 128,
                 prompt: str = "hello " * 64) -> RawRun:
    import uvloop

    return uvloop.run(run(port, num_users, duration_s, output_tokens, prompt))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8021)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--json", action="store_true", help="print the run as JSON (summary, cpu_s, num_tokens)")
    args = parser.parse_args()
    raw_run = run_blocking(args.port, args.users, args.duration)
    if args.json:
        as_json = {"summary": raw_run.summary.to_json(), "cpu_s": raw_run.cpu_s, "num_tokens": raw_run.num_tokens}
        print(orjson.dumps(as_json, option=orjson.OPT_SERIALIZE_NUMPY).decode())
        return
    s = raw_run.summary
    check, latency = s.client.check, s.latency
    assert check is not None
    print(f"c={args.users}: {s.requests.num_ok} requests, TTFT p50/p99 {latency.ttft_ms.p50:.2f}/"
          f"{latency.ttft_ms.p99:.2f} ms, ITL p50/p99 {latency.itl_ms.p50:.2f}/{latency.itl_ms.p99:.2f} ms, "
          f"{s.throughput.mean_in_flight:.1f} in flight, loop lag p99 {check.loop_lag_p99_ms:.1f} ms "
          f"(max {check.loop_lag_max_ms:.1f}), cpu {check.client_cpu_fraction:.0%}")


if __name__ == "__main__":
    main()
