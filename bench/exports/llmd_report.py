"""A level as llm-d's Benchmark Report (bench/exports/llmd_schema.py), one report per level.

The report's statistics are computed again from the level's own records (mean, standard deviation, minimum,
p10, p50, p90, p95, p99, maximum; the summary keeps fewer), in the units the format names: milliseconds, ms per
token, counts. Its service metrics come from the server's /metrics samples taken during the level, its
resources from the GPUs' readings, where there were any. TTFT, TPOT and ITL mean what they mean in this
toolkit's summary (the README's Metrics); `normalized_time_per_output_token` is a request's latency over its
output tokens. An imported run (`bench import`) is exported too: from the requests its files hold, or else
from the means and percentiles they gave, its source named in the report's metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.exports.llmd_schema import BenchmarkReport
from bench.run.rundir import Run
from loadgen.arrivals import parse_label
from loadgen.columns import NONE, LevelColumns
from loadgen.metrics import first_and_last_chunk, inter_token_gaps_s
from loadgen.types import Distribution, LevelSummary

TOOL_NAME = "llm-selfhost-bench"
MS = 1000.0


def llmd_report(run: Run, s: LevelSummary, c: LevelColumns | None, span: tuple[float, float] | None,
                samples: Sequence[dict[str, Any]]) -> BenchmarkReport:
    """One level as llm-d's Benchmark Report 0.1, validated by the model of its documented fields. Statistics
    from the level's requests where there are any; from the summary's (mean and percentiles) where an imported
    file gave its aggregates only."""
    lengths, latency = _from_requests(c) if c is not None else _from_summary(s)
    inside = [x for x in samples if span and span[0] <= x["t"] <= span[1]]
    start, stop = span if span else (None, None)
    imported = run.info.imported
    raw: dict[str, Any] = {
        "scenario": _scenario(run, s),
        "metrics": {
            "time": {"duration": s.throughput.window_s, "start": start, "stop": stop},
            "requests": {"total": s.requests.num_requests, "failures": s.requests.num_failed, **lengths},
            "latency": latency,
            "throughput": {"output_tokens_per_sec": s.throughput.output_tokens_per_s,
                           "input_tokens_per_sec": s.throughput.total_tokens_per_s - s.throughput.output_tokens_per_s,
                           "total_tokens_per_sec": s.throughput.total_tokens_per_s,
                           "requests_per_sec": s.throughput.request_per_s},
            "service": _service(inside),
            "resources": _resources(inside, run),
            "metadata": {"level": s.level, "is_valid": s.is_valid, "invalid_reasons": s.invalid_reasons,
                         "notes": s.notes, "slo_attainment": s.throughput.slo_attainment,
                         "steady_window": s.throughput.is_steady_window,
                         "definitions": (f"as {imported.tool} defines them, read as the notes say" if imported else
                                         "TTFT, TPOT and ITL as in the README's Metrics of llm-selfhost-bench; "
                                         "ITL: each gap between chunks spread over the chunk's tokens")},
        },
        "metadata": {"tool": TOOL_NAME, "run_dir": run.run_dir.name, "run_id": run.info.run_id,
                     "source": run.info.source(with_files=True)},
    }
    if raw["metrics"]["service"] is None:
        del raw["metrics"]["service"]
    if raw["metrics"]["resources"] is None:
        del raw["metrics"]["resources"]
    return BenchmarkReport.model_validate(raw)


def _from_requests(c: LevelColumns) -> tuple[dict[str, Any], dict[str, Any]]:
    """Input and output lengths, and the latencies, over the level's successful requests."""
    ok, k = c.ok, c.counts
    first, last = first_and_last_chunk(c)
    out = k["output_tokens"]
    many = ok & (out > 1)
    prompt = k["prompt_tokens"][ok & (k["prompt_tokens"] != NONE)]
    lengths = {"input_length": _stats(prompt, "count"), "output_length": _stats(out[ok], "count")}
    return lengths, {
        "time_to_first_token": _stats(first[ok] * MS, "ms"),
        "time_per_output_token": _stats((last[many] - first[many]) / (out[many] - 1) * MS, "ms/token"),
        "inter_token_latency": _stats(inter_token_gaps_s(c, ok) * MS, "ms/token"),
        "normalized_time_per_output_token": _stats(last[many] / out[many] * MS, "ms/token"),
        "request_latency": _stats(last[ok] * MS, "ms"),
    }


def _from_summary(s: LevelSummary) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same from a summary of a file's aggregates: the means and percentiles it gave, nothing more."""
    def stats(d: Distribution, units: str) -> dict[str, Any] | None:
        given = {stat: getattr(d, stat) for stat in ("mean", "p50", "p90", "p95", "p99")}
        return None if d.mean is None else {"units": units, **{k: v for k, v in given.items() if v is not None}}

    lengths = {"input_length": {"units": "count", "mean": s.tokens.mean_input_tokens},
               "output_length": {"units": "count", "mean": s.tokens.mean_output_tokens}}
    lat = s.latency
    return lengths, {"time_to_first_token": stats(lat.ttft_ms, "ms"),
                     "time_per_output_token": stats(lat.tpot_ms, "ms/token"),
                     "inter_token_latency": stats(lat.itl_ms, "ms/token"),
                     "request_latency": stats(lat.e2e_ms, "ms")}


def _scenario(run: Run, s: LevelSummary) -> dict[str, Any]:
    info = run.info
    engine, host = info.engine, info.hardware
    gpus = host.gpus if host and host.gpus else []
    spec = info.engine_spec
    tp = spec.tensor_parallel_size if spec else 1
    if gpus:
        accelerator = {"model": gpus[0].name, "memory": round(gpus[0].memory_gib * 1.073741824, 1)
                       if gpus[0].memory_gib else None, "count": len(gpus), "parallelism": {"tp": tp}}
    else:  # no GPU: the CPU it ran on, said as such
        accelerator = {"model": (host.cpu_model if host and host.cpu_model else "cpu"),
                       "count": host.cpus_usable or host.cpu_cores or 1 if host else 1,
                       "metadata": {"kind": "cpu cores: no GPU ran this level"}}
    args = dict(spec.args) if spec else {}
    command = engine.details.other.get("command")
    label = parse_label(s.level)
    load_args: dict[str, Any] = {"concurrency" if s.kind == "concurrency" else "rate" if s.kind == "rate"
                                 else "time_scale": s.target, "repeat": label.repeat}
    if label.adapters is not None:
        load_args["adapters"] = label.adapters
    workload = info.scenario.workload if info.scenario else None
    if workload is not None:
        load_args.update(api=workload.api, input_tokens=workload.input_tokens.describe(),
                         output_tokens=workload.output_tokens.describe(), seed=workload.seed)
    adapters = sorted({a.adapter for a in s.adapters or () if a.adapter != "(base)"})
    return {
        "description": (f"{s.level} {info.source()}, read by {TOOL_NAME}" if info.imported else
                        f"{info.scenario.name if info.scenario else 'a run'} at {s.level}, measured by {TOOL_NAME}"),
        "host": {"accelerator": [accelerator], "type": ["replica"]},
        "platform": {"engine": [{"name": engine.name, "version": engine.version, "args": args,
                                 "metadata": {"command": command} if command else None}]},
        "model": {"name": engine.model or (spec.model if spec and spec.model else "unknown"),
                  "quantization": run.precision,
                  "adapters": [{"lora": name} for name in adapters] or None},
        "load": {"name": info.imported.tool if info.imported else TOOL_NAME, "type": s.kind, "args": load_args},
    }


def _service(samples: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    running = np.array([x["requests_running"] for x in samples if "requests_running" in x], dtype=float)
    waiting = np.array([x["requests_waiting"] for x in samples if "requests_waiting" in x], dtype=float)
    kv = [x["kv_cache_usage"] for x in samples if "kv_cache_usage" in x]
    if not running.size and not waiting.size:
        return None
    service = {"batch_size": _stats(running, "count"), "queue_size": _stats(waiting, "count")}
    if kv:  # the engines publish the share of the cache in use, not its size in tokens
        service["metadata"] = {"kv_cache_usage": _stats(np.array(kv, dtype=float) * 100, "percent")}
    return service


def _resources(samples: Sequence[dict[str, Any]], run: Run) -> dict[str, Any] | None:
    readings = [x["gpus"] for x in samples if x.get("gpus")]
    if not readings:
        return None

    def over(key: str, combine: Any) -> np.ndarray:
        return np.array([combine([g[key] for g in gpus if g.get(key) is not None]) for gpus in readings
                         if any(g.get(key) is not None for g in gpus)], dtype=float)

    memory = over("memory_used_mib", sum)
    utilization = over("utilization_pct", lambda v: sum(v) / len(v))
    power = over("power_w", sum)
    return {"accelerator": [{
        "memory": {"consumption": _stats(memory, "MiB")} if memory.size else None,
        "compute": {"utilization": _stats(utilization, "percent")} if utilization.size else None,
        "power": _stats(power, "Watts") if power.size else None}]}


def _stats(values: np.ndarray, units: str) -> dict[str, Any] | None:
    """The format's statistics of `values`; None where there are none (the field is then left out)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    p10, p50, p90, p95, p99 = np.percentile(values, [10, 50, 90, 95, 99])
    return {"units": units, "mean": float(values.mean()), "stddev": float(values.std()), "min": float(values.min()),
            "p10": float(p10), "p50": float(p50), "p90": float(p90), "p95": float(p95), "p99": float(p99),
            "max": float(values.max())}
