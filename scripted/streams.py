"""The streams in flight on one server: the script now in force, who holds a stream slot and who waits for one
(`max_streams`), and one timer for every stream's next chunk (`Ticker`).

It knows a connection only as a `Sender` (its transport, if still open, and `send_planned`); the HTTP side is
scripted/protocol.py's.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
from dataclasses import fields, replace
from typing import Any, Protocol

from scripted.answers import StreamPlan
from scripted.provider_play import PrefixCache, TokenBucket
from scripted.script import Script, SentTiming, SpecCounters
from scripted.shapes import ShapeCounts


class Sender(Protocol):
    """A connection answering a stream (scripted/protocol.py `ScriptedProtocol`)."""

    @property
    def transport(self) -> object | None: ...

    def send_planned(self, plan: StreamPlan, index: int) -> None: ...


class Ticker:
    """Every stream's next chunk in one heap, behind one loop timer. Chunks due together are written in
    one pass, each once it is due, with no trip through the selector between them: at 256 streams that
    trip would cost more than the writes."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Sender, StreamPlan, int]] = []
        self.order = itertools.count()
        self.timer: asyncio.TimerHandle | None = None
        self.running = False

    def add(self, due: float, protocol: Sender, plan: StreamPlan, index: int) -> None:
        heapq.heappush(self.heap, (due, next(self.order), protocol, plan, index))
        if self.running or (self.timer is not None and self.timer.when() <= due):
            return
        if self.timer is not None:
            self.timer.cancel()
        self.timer = asyncio.get_running_loop().call_at(due, self.run_due)

    def run_due(self) -> None:
        loop = asyncio.get_running_loop()
        self.timer, self.running = None, True
        try:
            while self.heap and self.heap[0][0] <= loop.time():
                _, _, protocol, plan, index = heapq.heappop(self.heap)
                protocol.send_planned(plan, index)
        finally:
            self.running = False
            if self.heap:
                self.timer = loop.call_at(self.heap[0][0], self.run_due)


class ScriptState:
    """The script now in force, shared by every connection of one server, and the streams in flight."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.counter = itertools.count(1)
        self.sent = SentTiming()
        self.ticker = Ticker()
        self.streams_in_flight = 0
        self.waiting: collections.deque[tuple[Sender, StreamPlan]] = collections.deque()
        self.bucket = TokenBucket(script.rate_limit_per_s, script.rate_limit_burst)
        self.prefix_cache = PrefixCache(script.prefix_cache_block_words)
        self.prompts: list[str] = []  # sha256 of each completion request's messages (or prompt), as they came
        self.models: list[str | None] = []  # the model each completion request asked for, as they came
        self.spec = SpecCounters()  # speculative decoding as played (script.spec_tokens > 0)
        self.shapes = ShapeCounts()  # shaped answers given, and how many validly

    def admit(self, protocol: Sender, plan: StreamPlan) -> None:
        """Start the stream now, or queue it while `max_streams` are in flight."""
        cap = self.script.max_streams
        if cap and self.streams_in_flight >= cap:
            self.waiting.append((protocol, plan))
        else:
            self.start(protocol, plan, plan.arrived)

    def start(self, protocol: Sender, plan: StreamPlan, start: float) -> None:
        self.streams_in_flight += 1
        plan.is_streaming = True
        plan.next_due = start + plan.first_due_s()
        self.ticker.add(plan.next_due, protocol, plan, 0)

    def release(self, plan: StreamPlan) -> None:
        """A stream ended (or its connection did): its slot goes to the first request waiting for one."""
        if not plan.is_streaming:
            return
        plan.is_streaming = False
        self.streams_in_flight -= 1
        while self.waiting and (not self.script.max_streams or self.streams_in_flight < self.script.max_streams):
            protocol, queued = self.waiting.popleft()
            if protocol.transport is not None:
                self.start(protocol, queued, asyncio.get_running_loop().time())

    def update(self, changes: dict[str, Any]) -> None:
        unknown = set(changes) - {f.name for f in fields(Script)}
        if unknown:
            raise ValueError(f"unknown script field(s): {', '.join(sorted(unknown))}")
        self.script = replace(self.script, **changes)
        self.counter = itertools.count(1)
        self.bucket = TokenBucket(self.script.rate_limit_per_s, self.script.rate_limit_burst)
        self.prefix_cache = PrefixCache(self.script.prefix_cache_block_words)
        self.shapes = ShapeCounts()  # the share holds from here on
