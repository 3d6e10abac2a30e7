"""Prometheus metrics of the reference engine, under vLLM's names where the meaning is the same.

Contract: one `EngineMetrics` per server, on a registry of its own (never the global one), labelled
`model_name` like vLLM's. `record_step` is called by the engine's step thread after each step with the
engine's stats snapshot and that step's outputs; counters advance by the difference from the previous
snapshot, so they are exact however often it is called. `render()` is the /metrics body.
prometheus_client is thread-safe, so scraping from the event loop while the step thread records is fine.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from engines.reference.core.engine import EngineStats, RequestOutput
from engines.reference.core.speculative import SpecDecodeCounters

CONTENT_TYPE = CONTENT_TYPE_LATEST

# vLLM's buckets (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TOKENS_PER_STEP_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)  # vLLM's, to 16k
STEP_BUCKETS_S = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0)
ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip

# EngineStats counter field -> (metric name without _total, help)
_COUNTERS = {
    "num_prefix_cache_query_tokens": ("vllm:prefix_cache_queries", "Prefix cache queries, in queried tokens."),
    "num_prefix_cache_hit_tokens": ("vllm:prefix_cache_hits", "Prefix cache hits, in cached tokens."),
    "num_prompt_tokens": ("vllm:prompt_tokens", "Prefill tokens processed (prompts of requests that started)."),
    "num_generation_tokens": ("vllm:generation_tokens", "Generation tokens processed."),
    "num_preemptions": ("vllm:num_preemptions", "Cumulative number of preemptions (recompute)."),
    # vLLM publishes no such count: our own name. Every request added ends as one vllm:request_success.
    "num_requests_added": ("reference:requests_added", "Requests the engine accepted."),
}


class EngineMetrics:
    """Gauges, counters and latency histograms of one engine, on a private registry."""

    def __init__(self, model_name: str, max_loras: int | None = None, speculative: bool = False) -> None:
        """`max_loras`: LoRA is served, with that many adapters a batch (vllm:lora_requests_info is published);
        `speculative`: the engine speculates (vLLM's spec_decode counters are published)."""
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["model_name"]

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=self.registry, multiprocess_mode="mostrecent")

        self._running = gauge("vllm:num_requests_running", "Requests in the running batch.").labels(model_name)
        self._waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.").labels(model_name)
        self._kv_usage = gauge("vllm:kv_cache_usage_perc", "KV cache usage, 1 = all blocks in use.").labels(model_name)
        self._counters = {
            field: Counter(name, doc, labels, registry=self.registry).labels(model_name)
            for field, (name, doc) in _COUNTERS.items()
        }
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token (from arrival at the engine).",
            labels,
            buckets=TTFT_BUCKETS_S,
            registry=self.registry,
        ).labels(model_name)
        self._itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Time between consecutive output tokens of a request.",
            labels,
            buckets=ITL_BUCKETS_S,
            registry=self.registry,
        ).labels(model_name)
        self._success = Counter(
            "vllm:request_success", "Finished requests, by finish reason.", [*labels, "finished_reason"],
            registry=self.registry,
        )  # fmt: skip
        self._model_name = model_name
        self._previous: EngineStats | None = None
        self._step_metrics = _StepMetrics(self.registry, labels, model_name)
        # vLLM's LoRA series: the adapters running and waiting as comma-joined labels, the value the time they
        # were seen; only the latest label set is kept, so a scrape reads one series
        self._max_loras = max_loras
        self._lora_info = None if max_loras is None else Gauge(
            "vllm:lora_requests_info", "Running and waiting LoRA adapters (the value: when last seen).",
            ["max_lora", "waiting_lora_adapters", "running_lora_adapters"], registry=self.registry,
            multiprocess_mode="mostrecent",
        )  # fmt: skip
        self._lora_labels: tuple[str, str, str] | None = None
        self._spec = _SpecDecodeMetrics(self.registry, labels, model_name) if speculative else None

    def record_step(self, stats: EngineStats, outputs: Iterable[RequestOutput] = ()) -> None:
        """Set the gauges from `stats`, advance the counters by its change, observe each output's latencies."""
        self._running.set(stats.num_running)
        self._waiting.set(stats.num_waiting)
        self._kv_usage.set(stats.kv_cache_usage_perc)
        for field, counter in self._counters.items():
            delta = getattr(stats, field) - (getattr(self._previous, field) if self._previous else 0)
            if delta > 0:
                counter.inc(delta)
        if self._previous is not None and stats.num_steps > self._previous.num_steps:  # not the warm-up's
            self._step_metrics.record(stats)
        if self._spec is not None and stats.spec_decode is not None:
            self._spec.record(stats.spec_decode)
        self._previous = stats
        if self._lora_info is not None:
            labels = (str(self._max_loras), ",".join(stats.waiting_adapters), ",".join(stats.running_adapters))
            if self._lora_labels is not None and labels != self._lora_labels:
                self._lora_info.remove(*self._lora_labels)
            self._lora_info.labels(*labels).set(time.time())
            self._lora_labels = labels
        for output in outputs:
            if output.ttft_s is not None:
                self._ttft.observe(output.ttft_s)
            if output.itl_s is not None:
                self._itl.observe(output.itl_s)
            if output.finish_reason is not None:
                self._success.labels(self._model_name, output.finish_reason).inc()

    def record_abort(self) -> None:
        self._success.labels(self._model_name, "abort").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _SpecDecodeMetrics:
    """Speculative decoding's counters under vLLM's names: drafts (rows verified with drafts), draft tokens,
    accepted tokens, and accepted tokens per draft position; advanced by the engine's cumulative counts."""

    def __init__(self, registry: CollectorRegistry, labels: list[str], model_name: str) -> None:
        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=registry).labels(model_name)

        self._drafts = counter("vllm:spec_decode_num_drafts", "Rows verified with draft tokens.")
        self._draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Draft tokens proposed.")
        self._accepted = counter("vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted.")
        self._per_position = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                     "Draft tokens accepted, by their position in the draft.", [*labels, "position"],
                                     registry=registry)
        self._model_name = model_name
        self._positions: list[Counter] = []
        self._previous = SpecDecodeCounters()

    def record(self, now: SpecDecodeCounters) -> None:
        before = self._previous
        for counter, delta in ((self._drafts, now.num_drafts - before.num_drafts),
                               (self._draft_tokens, now.num_draft_tokens - before.num_draft_tokens),
                               (self._accepted, now.num_accepted_tokens - before.num_accepted_tokens)):
            if delta > 0:
                counter.inc(delta)
        while len(self._positions) < len(now.accepted_per_position):  # each position published once drafted
            self._positions.append(self._per_position.labels(self._model_name, str(len(self._positions))))
        for position, (series, count) in enumerate(zip(self._positions, now.accepted_per_position, strict=False)):
            was = before.accepted_per_position[position] if position < len(before.accepted_per_position) else 0
            if count > was:
                series.inc(count - was)
        self._previous = now


class _StepMetrics:
    """Each step's time and tokens (prefill and decode apart), and the step cost the engine learned from them.
    vLLM's name where it publishes the same (vllm:iteration_tokens_total); ours under reference:."""

    def __init__(self, registry: CollectorRegistry, labels: list[str], model_name: str) -> None:
        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=registry)

        self._tokens = histogram("vllm:iteration_tokens_total", "Tokens computed per engine step.",
                                 TOKENS_PER_STEP_BUCKETS).labels(model_name)
        self._prefill = histogram("reference:step_prefill_tokens", "Prompt tokens computed per engine step.",
                                  TOKENS_PER_STEP_BUCKETS).labels(model_name)
        self._decode = histogram("reference:step_decode_tokens", "Decode rows (one token each) per engine step.",
                                 TOKENS_PER_STEP_BUCKETS).labels(model_name)
        self._seconds = histogram("reference:step_duration_seconds", "Time of one engine step (model, sampling, "
                                  "detokenizing).", STEP_BUCKETS_S).labels(model_name)
        cost = Gauge("reference:step_cost_milliseconds", "The step cost the engine learned: fixed a step, a decode "
                     "row, a prompt token.", [*labels, "part"], registry=registry, multiprocess_mode="mostrecent")
        self._cost = {part: cost.labels(model_name, part) for part in ("step", "decode_row", "prefill_token")}

    def record(self, stats: EngineStats) -> None:
        shape = stats.last_step_shape
        if shape is not None and stats.last_step_ms is not None:
            self._tokens.observe(shape.num_decode_rows + shape.num_prefill_tokens)
            self._prefill.observe(shape.num_prefill_tokens)
            self._decode.observe(shape.num_decode_rows)
            self._seconds.observe(stats.last_step_ms / 1000)
        if stats.step_cost is not None:
            for part, value in zip(self._cost, (stats.step_cost.fixed_ms, stats.step_cost.decode_row_ms,
                                                stats.step_cost.prefill_token_ms), strict=True):
                self._cost[part].set(value)
