"""The server's own view over time: its Prometheus `/metrics`, sampled about once a second into
`telemetry.jsonl`, and what each level looked like from there (requests running and waiting, KV cache
use, preemptions, prefix-cache hits, speculative decoding's drafts and acceptance).

The sampler is a process of its own (`python -m loadgen.telemetry URL FILE [--gpu]`), so parsing a large
metrics page never pauses the load generator's event loop. With `--gpu` each line also carries the GPUs'
own readings (`loadgen.gpu`: power, utilization, memory, clock, temperature), when the engine runs here.
Engines publish the same quantities under different names; `SERIES` maps ours to theirs (vLLM, SGLang,
llama.cpp; the reference engine uses vLLM's). A server without `/metrics` gives no samples, and nothing
fails for it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from common.processes import terminate
from loadgen.gpu import find_reader
from loadgen.types import GpuView, ServerView, SpecDecodeView

SAMPLE_INTERVAL_S = 1.0
NO_URL = "-"  # the sampler's URL when the server publishes no /metrics (GPUs only)

# ours -> the sample names engines publish (counters with their `_total` suffix), first present wins
SERIES: dict[str, tuple[str, ...]] = {
    "requests_running": ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"),
    "requests_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
                       "llamacpp:kv_cache_usage_ratio"),
    "preemptions_total": ("vllm:num_preemptions_total",),
    "prefix_cache_queries_total": ("vllm:prefix_cache_queries_total",),
    "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total",),
    "generation_tokens_total": ("vllm:generation_tokens_total", "sglang:generation_tokens_total",
                                "llamacpp:tokens_predicted_total"),
    # speculative decoding: vLLM's counters (the reference engine publishes the same) ...
    "spec_drafts_total": ("vllm:spec_decode_num_drafts_total",),
    "spec_draft_tokens_total": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted_tokens_total": ("vllm:spec_decode_num_accepted_tokens_total",),
    # ... or SGLang's gauge, the mean acceptance length over its last log interval (averaged over label sets)
    "spec_accept_length": ("sglang:spec_accept_length",),
}
SPEC_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"  # one sample per {position="k"}
SPEC_POSITION_KEY = "spec_accepted_pos_"  # ours: spec_accepted_pos_0, _1, ...
AVERAGED = {"sglang:spec_accept_length"}  # gauges of a mean: averaged over label sets (data-parallel ranks), not summed


LORA_SERIES = "vllm:lora_requests_info"
MAX_SPEC_POSITIONS = 64  # more draft positions than any engine proposes: a hostile page names no more


def parse_metrics(text: str) -> dict[str, float]:
    """Our series from a Prometheus text page, each summed over its label sets (e.g. one per model)."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    label_sets: dict[str, int] = {}
    lora: tuple[float, dict[str, str]] | None = None  # vLLM's LoRA series: the latest label set (its value: when)
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name] = found.get(sample.name, 0.0) + float(sample.value)
            if sample.name in AVERAGED:
                label_sets[sample.name] = label_sets.get(sample.name, 0) + 1
            elif sample.name == LORA_SERIES and (lora is None or sample.value > lora[0]):
                lora = (float(sample.value), sample.labels)
            elif sample.name == SPEC_PER_POSITION:
                position = sample.labels.get("position", "")
                if position.isdigit() and int(position) < MAX_SPEC_POSITIONS:
                    key = SPEC_POSITION_KEY + str(int(position))
                    values[key] = values.get(key, 0.0) + float(sample.value)
    for name, count in label_sets.items():
        found[name] /= count
    if lora is not None:  # distinct adapters running and waiting: comma-joined names
        for ours, label in (("running_adapters", "running_lora_adapters"),
                            ("waiting_adapters", "waiting_lora_adapters")):
            values[ours] = float(len([name for name in lora[1].get(label, "").split(",") if name]))
    for ours, theirs in SERIES.items():
        name = next((n for n in theirs if n in found), None)
        if name is not None:
            values[ours] = found[name]
    return values


def metrics_url(base_url: str) -> str:
    """`http://host:port/v1` -> `http://host:port/metrics` (engines serve it beside the API, not under it)."""
    return base_url.rstrip("/").removesuffix("/v1") + "/metrics"


def probe(url: str) -> str | None:
    """None if `url` serves metrics we know; else why not (said in run.json, never an error)."""
    try:
        response = httpx.get(url, timeout=5)
    except httpx.HTTPError as exc:
        return f"no answer at {url}: {type(exc).__name__}"
    if response.status_code != 200:
        return f"{url} answered HTTP {response.status_code}"
    try:
        values = parse_metrics(response.text)
    except ValueError as exc:
        return f"{url} is not Prometheus text: {exc}"
    return None if values else f"{url} publishes none of the series we read"


@contextmanager
def sampling(url: str | None, path: Path, gpu: bool = False) -> Iterator[None]:
    """Sample `url` (and the GPUs, with `gpu`) into `path` in a child process while the block runs; stopped
    on every exit path. Nothing to sample: nothing started."""
    if url is None and not gpu:
        yield
        return
    command = [sys.executable, "-m", "loadgen.telemetry", url or NO_URL, str(path), "--parent", str(os.getpid()),
               *(["--gpu"] if gpu else [])]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _first_sample(path, process)
        yield
    finally:
        terminate(process)


FIRST_SAMPLE_WAIT_S = 15.0


def _first_sample(path: Path, process: subprocess.Popen[bytes], wait_s: float = FIRST_SAMPLE_WAIT_S) -> None:
    """Wait (a while at most) for the sampler's first line: on a machine whose cores the engines already keep
    busy, a fresh Python takes seconds to start, and a short level would pass unsampled."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and process.poll() is None:
        if path.is_file() and path.stat().st_size > 0:
            return
        time.sleep(0.05)


def sample_until_stopped(
    url: str | None, path: Path, interval_s: float = SAMPLE_INTERVAL_S, parent: int | None = None, gpu: bool = False
) -> None:
    """One JSON line per sample: `t` (unix seconds), the series the server published and, with `gpu`, `gpus`
    (one reading per GPU); until stopped, or until `parent` (by default the process that started this one)
    is gone."""
    from loadgen.recorder import JsonlWriter

    # Ctrl-C reaches the whole process group; the parent stops us with SIGTERM (every line is flushed).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = parent or os.getppid()
    read_gpus = find_reader()[0] if gpu else None
    with JsonlWriter(path) as writer, httpx.Client(timeout=interval_s * 2) as client:
        next_at = time.monotonic()
        while os.getppid() == parent:  # a parent killed outright can't stop us: then we stop ourselves
            taken_at = time.time()
            line: dict[str, Any] = _server_values(client, url) if url else {}
            if read_gpus is not None:
                try:
                    line["gpus"] = [sample.to_json() for sample in read_gpus()]
                except (OSError, ValueError, RuntimeError, subprocess.SubprocessError):
                    pass  # a reading missed is a sample missed
            if line:
                writer.write({"t": round(taken_at, 3), **line})
            next_at += interval_s
            time.sleep(max(0.0, next_at - time.monotonic()))


def _server_values(client: httpx.Client, url: str) -> dict[str, Any]:
    try:
        response = client.get(url)
        return parse_metrics(response.text) if response.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return {}  # a busy or restarting server misses a sample, nothing more


def server_view(level: str, samples: list[dict[str, Any]], start_unix_s: float, end_unix_s: float) -> ServerView:
    inside = [s for s in samples if start_unix_s <= s["t"] <= end_unix_s and any(key in s for key in SERIES)]
    # (the LoRA series rides with the others: a server that publishes it publishes those)

    def mean(key: str) -> float | None:
        values = [s[key] for s in inside if key in s]
        return sum(values) / len(values) if values else None

    def growth(key: str) -> float | None:
        values = [s[key] for s in inside if key in s]
        return values[-1] - values[0] if len(values) >= 2 else None

    kv = [s["kv_cache_usage"] for s in inside if "kv_cache_usage" in s]
    queries, hits = growth("prefix_cache_queries_total"), growth("prefix_cache_hits_total")
    drafts, drafted, accepted = growth("spec_drafts_total"), growth("spec_draft_tokens_total"), \
        growth("spec_accepted_tokens_total")
    spec = None
    if drafts is not None and drafted is not None and accepted is not None:
        positions = sorted({int(k.removeprefix(SPEC_POSITION_KEY)) for s in inside for k in s
                            if k.startswith(SPEC_POSITION_KEY)})
        by_position = [growth(f"{SPEC_POSITION_KEY}{k}") or 0.0 for k in range(max(positions, default=-1) + 1)]
        spec = SpecDecodeView.of_counts(drafts, drafted, accepted, by_position)
    elif (length := mean("spec_accept_length")) is not None and length > 0:  # 0: its default, no speculation
        spec = SpecDecodeView(mean_acceptance_length=length)
    return ServerView(
        level=level, num_samples=len(inside), mean_running=mean("requests_running"),
        mean_waiting=mean("requests_waiting"), max_kv_cache_usage=max(kv) if kv else None,
        preemptions=growth("preemptions_total"),
        prefix_cache_hit_rate=hits / queries if queries and hits is not None else None,
        generated_tokens=growth("generation_tokens_total"), prefix_cache_queries=queries,
        mean_running_adapters=mean("running_adapters"), mean_waiting_adapters=mean("waiting_adapters"), spec=spec,
    )


def summed_view(level: str, views: Sequence[ServerView]) -> ServerView:
    """Replicas behind a router as one server: requests running and waiting, preemptions and tokens summed,
    prefix hits over lookups pooled (each replica weighed by its lookups), the fullest KV cache."""
    def total(values: Iterable[float | None]) -> float | None:
        given = [v for v in values if v is not None]
        return sum(given) if given else None

    weighed = [(v.prefix_cache_hit_rate, v.prefix_cache_queries) for v in views
               if v.prefix_cache_hit_rate is not None and v.prefix_cache_queries]
    lookups = sum(q for _, q in weighed)
    kv = [v.max_kv_cache_usage for v in views if v.max_kv_cache_usage is not None]
    return ServerView(
        level=level, num_samples=min((v.num_samples for v in views), default=0),
        mean_running=total(v.mean_running for v in views), mean_waiting=total(v.mean_waiting for v in views),
        max_kv_cache_usage=max(kv) if kv else None, preemptions=total(v.preemptions for v in views),
        prefix_cache_hit_rate=sum(rate * q for rate, q in weighed) / lookups if lookups else None,
        generated_tokens=total(v.generated_tokens for v in views), prefix_cache_queries=lookups or None,
        num_replicas=len(views), mean_running_adapters=_mean_of(v.mean_running_adapters for v in views),
        mean_waiting_adapters=_mean_of(v.mean_waiting_adapters for v in views), spec=_summed_spec(views))


def _summed_spec(views: Sequence[ServerView]) -> SpecDecodeView | None:
    """Replicas' counters summed (so each weighs by its drafts); where some publish only a mean length, the mean
    of those."""
    specs = [v.spec for v in views if v.spec is not None]
    counted = [s for s in specs if s.is_counted]
    if counted and len(counted) == len(specs):
        positions = max(len(s.acceptance_by_position) for s in counted)
        by_position = [sum(s.drafts * (s.acceptance_by_position[k] if k < len(s.acceptance_by_position) else 0.0)
                           for s in counted) for k in range(positions)]  # type: ignore[operator]
        return SpecDecodeView.of_counts(sum(s.drafts for s in counted), sum(s.draft_tokens for s in counted),
                                        sum(s.accepted_tokens for s in counted), by_position)  # type: ignore[misc]
    length = _mean_of(s.mean_acceptance_length for s in specs)
    return SpecDecodeView(mean_acceptance_length=length) if length is not None else None


def _mean_of(values: Iterable[float | None]) -> float | None:
    """Per replica (each batch its own): the adapters a batch held, averaged over the replicas that said."""
    given = [v for v in values if v is not None]
    return sum(given) / len(given) if given else None


def gpu_view(level: str, samples: list[dict[str, Any]], start_unix_s: float, end_unix_s: float) -> GpuView:
    """The GPUs over one level: power summed over them (the fleet's draw), utilization averaged."""
    readings = [s["gpus"] for s in samples if start_unix_s <= s["t"] <= end_unix_s and s.get("gpus")]

    def per_sample(key: str, combine: Callable[[list[float]], float]) -> list[float]:
        values = [[g[key] for g in gpus if g.get(key) is not None] for gpus in readings]
        return [combine(v) for v in values if v]

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    power = per_sample("power_w", sum)
    memory = per_sample("memory_used_mib", sum)
    temperature = per_sample("temperature_c", max)
    return GpuView(
        level=level, num_samples=len(readings), num_gpus=max((len(g) for g in readings), default=0),
        names=tuple(sorted({g["name"] for gpus in readings for g in gpus})),
        mean_power_w=mean(power), max_power_w=max(power) if power else None,
        mean_utilization_pct=mean(per_sample("utilization_pct", lambda v: sum(v) / len(v))),
        max_memory_used_mib=max(memory) if memory else None,
        mean_sm_clock_mhz=mean(per_sample("sm_clock_mhz", lambda v: sum(v) / len(v))),
        max_temperature_c=max(temperature) if temperature else None)


def main() -> None:
    parser = argparse.ArgumentParser(description="Sample a server's Prometheus /metrics (and the GPUs) into a "
                                                 "JSON-lines file.")
    parser.add_argument("url", help=f"the server's /metrics URL, or {NO_URL} for none")
    parser.add_argument("path", type=Path)
    parser.add_argument("--interval", type=float, default=SAMPLE_INTERVAL_S)
    parser.add_argument("--parent", type=int, help="stop when this process is no longer our parent")
    parser.add_argument("--gpu", action="store_true", help="also read the GPUs (NVML or nvidia-smi)")
    args = parser.parse_args()
    sample_until_stopped(None if args.url == NO_URL else args.url, args.path, args.interval, args.parent, args.gpu)


if __name__ == "__main__":
    main()
