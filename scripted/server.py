"""An OpenAI-compatible streaming server whose timing and faults are scripted, to calibrate clients.

Every answer follows the script: the first chunk `ttft_ms` after the request arrived, then one chunk
every `itl_ms`, each carrying `tokens_per_chunk` tokens, on an absolute schedule (no drift). Faults:
`http_500`, `http_429` (with Retry-After), `error_event`, `rate_limit_event` (a provider's rate-limit error
sent as an event, after the 200), `cut` (the connection drops mid-stream),
`stall` (no chunk for `stall_ms`, once, after `fault_after_chunks` chunks), `drop` (the connection is
closed without an answer), `drop_reused` (the same, only on a kept-alive connection that already served a
request: what a client sees when a server closes idle connections); `fault_every` = n applies the fault to
every n-th request only. `PUT /_script` changes the script of a running server; `GET /_sent` says when
the chunks really left (time to first chunk and gaps between chunks, as percentiles) and clears that;
`GET /_prompts` lists a hash of every prompt that arrived, in order, and clears that (so a client can be held
to never sending one twice). `adapters` are LoRA adapters it serves beside `model` (listed at /v1/models with
their parent, as vLLM lists them; answered like the model); `GET /_models` lists the model every completion
request asked for, in order, and clears that.

A provider can be played too: `reasoning_tokens` streams that many tokens first as `delta.reasoning_content`
(and reports them in `usage.completion_tokens_details`), `rate_limit_per_s` answers 429 with Retry-After
past a token bucket of that many requests a second (`rate_limit_burst` deep), and `prefix_cache_block_words`
reports as `cached_tokens` the prompt's leading blocks of words already seen in an earlier prompt.
`spec_tokens` plays speculative decoding: each chunk is one draft of that many tokens, its tokens past the
first accepted, counted at `GET /metrics` under vLLM's names (the only time it serves /metrics).
A request that asks for a shape (`response_format` json_object or json_schema, `tools`) is answered in it:
`valid_share` of them validly, the rest broken in a known way (scripted/shapes.py); `GET /_shapes` says how many
were answered and how many validly, and clears that.

Load can be scripted too, so a capacity under an SLO is known in closed form: `itl_per_stream_ms` adds
that much to every gap for each other stream in flight (gap = itl_ms + itl_per_stream_ms * (streams - 1),
taken when the gap starts), and `max_streams` caps the streams in flight: past it a request waits, in
arrival order, and its time to first token includes the wait.

It speaks plain HTTP/1.1 (keep-alive, chunked transfer) on non-blocking sockets driven by asyncio, with
timers instead of a task per stream: its own overhead must stay far below the timing it promises, even
when 256 streams tick in the same millisecond. A request's schedule starts when the kernel received it
(`SO_TIMESTAMPNS`, on Linux), so a burst of arrivals the server is slow to read still gets its promised
timing.

    python -m scripted --port 8011 --ttft-ms 100 --itl-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import select
import selectors
import signal
import socket

from scripted.connection import Connection
from scripted.protocol import ScriptedProtocol
from scripted.script import Script
from scripted.streams import ScriptState


class PreciseEpollSelector(selectors.EpollSelector):
    """epoll, woken on time to the microsecond. epoll rounds its timeout up to whole milliseconds, which
    would put up to 1 ms of the server's own jitter into every gap it promises; select() keeps
    microseconds but costs time in proportion to every open connection on each pass. So the wait is a
    select() on the epoll descriptor alone, and epoll then says which connections are ready."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout > 0:
            select.select([self.fileno()], [], [], timeout)
        return super().select(0)


class Listener:
    """Accepts connections and gives each its own `ScriptedProtocol`, all sharing one script."""

    def __init__(self, host: str, port: int, script: Script, loop: asyncio.AbstractEventLoop) -> None:
        self.state = ScriptState(script)
        self.loop = loop
        self.sock = socket.create_server((host, port), backlog=4096)
        self.sock.setblocking(False)
        self.port: int = self.sock.getsockname()[1]
        loop.add_reader(self.sock.fileno(), self.accept)

    def accept(self) -> None:
        while True:
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. out of file descriptors: the client sees a refused connection
                return
            Connection(sock, ScriptedProtocol(self.state), self.loop)

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


async def _main(host: str, port: int, script: Script) -> None:
    loop = asyncio.get_running_loop()
    listener = Listener(host, port, script, loop)
    # A full collection pauses every stream; what lives from start-up on is left out of the scans, and
    # collections come rarely (what a connection leaves behind is freed by reference counting).
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # PID 1 in a container ignores signals it has no handler for
        loop.add_signal_handler(sig, stop.set)
    print(f"scripted server listening on http://{host}:{listener.port}/v1", flush=True)
    await stop.wait()
    listener.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m scripted", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011, help="0 picks a free port (printed at start)")
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--itl-per-stream-ms", type=float, default=0.0, help="added to each gap per other stream")
    parser.add_argument("--max-streams", type=int, default=0, help="streams in flight at most (0: no cap)")
    parser.add_argument("--reasoning-tokens", type=int, default=0, help="tokens streamed first as reasoning")
    parser.add_argument("--rate-limit-per-s", type=float, default=0.0, help="429 past this many requests/s (0: none)")
    parser.add_argument("--prefix-cache-block-words", type=int, default=0, help="report cached tokens (0: none)")
    parser.add_argument("--adapters", default="", help="NAME,NAME,...: LoRA adapters served beside --model")
    parser.add_argument("--spec-tokens", type=int, default=0,
                        help="play speculative decoding with this many draft tokens a step, counted at /metrics")
    parser.add_argument("--valid-share", type=float, default=1.0,
                        help="the share of shaped answers (JSON, a schema, tool calls) given validly")
    args = parser.parse_args()
    script = Script(args.ttft_ms, args.itl_ms, args.tokens_per_chunk, model=args.model,
                    itl_per_stream_ms=args.itl_per_stream_ms, max_streams=args.max_streams,
                    reasoning_tokens=args.reasoning_tokens, rate_limit_per_s=args.rate_limit_per_s,
                    prefix_cache_block_words=args.prefix_cache_block_words,
                    adapters=tuple(name for name in args.adapters.split(",") if name), spec_tokens=args.spec_tokens,
                    valid_share=args.valid_share)
    loop = asyncio.SelectorEventLoop(PreciseEpollSelector() if hasattr(select, "epoll") else selectors.SelectSelector())
    try:
        loop.run_until_complete(_main(args.host, args.port, script))
    finally:
        loop.close()
