"""guidellm's `benchmarks.json` (a GenerativeBenchmarksReport, schema version 2 as guidellm 0.8 writes it): one
level per benchmark, that is per strategy it ran.

The fields read (guidellm's names): `metadata.guidellm_version`; for each of `benchmarks`, `config.strategy`
(`type_` synchronous, concurrent with `streams`, throughput with `max_concurrency`, constant or poisson with
`rate`, trace), `config.backend.model`, `duration`, and in `metrics` the request totals (`request_totals`:
successful, errored, incomplete) and, each a distribution by status whose `successful` part is read (`mean`,
`median`, `percentiles.p50/p90/p95/p99`): `requests_per_second`, `output_tokens_per_second`, `tokens_per_second`,
`request_concurrency` (its `total`), `request_latency` (seconds), `time_to_first_token_ms`,
`inter_token_latency_ms`, `prompt_token_count`, `output_token_count` and `request_goodput` where set.

guidellm's ITL is a request's (last token - first token) / (output tokens - 1), which is this toolkit's TPOT; its
TPOT counts the first token's wait too and has no counterpart here, so it is not read. The gaps between single
tokens and between chunks (our ITL and ICL) are not in the file. guidellm keeps its requests only as a sample of
first and last token times, so a level is the file's distributions, not a rebuild of its requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.imports.common import (
    Aggregates,
    ImportedLevel,
    ImportFileError,
    aggregate_summary,
    is_count,
    is_number,
    latency,
    load_json,
    load_label,
    part,
    shown,
)
from loadgen.types import Distribution

WHAT = "guidellm's benchmarks.json"
NOT_GIVEN = ("no per-request records (guidellm keeps a sample of first and last token times): figures as the "
             "file gives them, SLO attainment not measured, no client self-check",
             "guidellm's ITL (a request's mean gap after its first token) is read as this toolkit's TPOT; the "
             "gaps between tokens and between chunks (ITL, ICL) are not in the file")
OPTIONAL = ("time_to_first_token_ms", "inter_token_latency_ms", "request_latency")


def read_guidellm(path: Path, run_id: str = "imported") -> list[ImportedLevel]:
    """A level for each benchmark in the report, in the order they ran."""
    raw = load_json(path, WHAT)
    benchmarks = raw.get("benchmarks")
    if not isinstance(benchmarks, list):
        raise ImportFileError(f"{path}: benchmarks is {shown(benchmarks)}; {WHAT} has it as a list of benchmarks")
    version = part(raw, "metadata").get("guidellm_version")
    version = str(version) if version else None
    return [_level(benchmark, f"{path}: benchmarks[{i}]", path.name, version)
            for i, benchmark in enumerate(benchmarks)]


def _level(benchmark: Any, where: str, file_name: str, version: str | None) -> ImportedLevel:
    if not isinstance(benchmark, dict):
        raise ImportFileError(f"{where}: expected a benchmark object")
    config = _object(benchmark, "config", where)
    metrics = _object(benchmark, "metrics", where)
    duration = benchmark.get("duration")
    if not is_number(duration) or duration <= 0:
        raise ImportFileError(f"{where}.duration is {shown(duration)}; expected the seconds it measured, > 0")
    totals = _object(metrics, "request_totals", f"{where}.metrics")
    counts = {}
    for status in ("successful", "errored", "incomplete"):
        value = totals.get(status)
        if not is_count(value):
            raise ImportFileError(f"{where}.metrics.request_totals.{status} is {shown(value)}; expected a count")
        counts[status] = value
    concurrency = _successful(metrics, "request_concurrency", where, status="total")
    kind, target, how = _load(_object(config, "strategy", f"{where}.config"), f"{where}.config.strategy",
                              concurrency.mean)
    label = load_label(kind, target)
    model = part(config, "backend").get("model")
    notes = [f"imported from guidellm{' ' + version if version else ''} ({file_name}): {how}", *NOT_GIVEN]
    if counts["incomplete"]:
        notes.append(f"{counts['incomplete']} requests were cut off when the benchmark ended (guidellm's "
                     "incomplete): counted as failed")
    missing = [name for name in OPTIONAL if metrics.get(name) is None]
    if missing:
        notes.append(f"the file gives no {', '.join(missing)}: not known for this level")
    e2e_s = _successful(metrics, "request_latency", where)
    e2e = Distribution(*(None if v is None else v * 1000 for v in (e2e_s.mean, e2e_s.p50, e2e_s.p90, e2e_s.p95,
                                                                   e2e_s.p99)))
    goodput = metrics.get("request_goodput")
    summary = aggregate_summary("endpoint", Aggregates(
        label=label, kind=kind, target=target, num_ok=counts["successful"],
        num_failed=counts["errored"] + counts["incomplete"], duration_s=float(duration),
        request_per_s=_mean(metrics, "requests_per_second", where),
        output_tokens_per_s=_mean(metrics, "output_tokens_per_second", where),
        total_tokens_per_s=_mean(metrics, "tokens_per_second", where),
        latency=latency(ttft=_successful(metrics, "time_to_first_token_ms", where),
                        tpot=_successful(metrics, "inter_token_latency_ms", where), e2e=e2e),
        mean_input_tokens=_mean(metrics, "prompt_token_count", where),
        mean_output_tokens=_mean(metrics, "output_token_count", where),
        mean_in_flight=concurrency.mean if concurrency.mean is not None else target,
        goodput_request_per_s=_mean(metrics, "request_goodput", where) if isinstance(goodput, dict) else None),
        notes)
    return ImportedLevel(label, "endpoint", str(model) if model else None, version, summary=summary,
                         notes=tuple(notes))


def _load(strategy: dict[str, Any], where: str, mean_concurrency: float | None) -> tuple[str, float, str]:
    """The strategy as this toolkit's kind of load, its target, and how it was run."""
    kind, cap = strategy.get("type_"), strategy.get("max_concurrency")
    capped = f", at most {cap} in flight" if is_count(cap, 1) else ""
    if kind == "synchronous":
        return "concurrency", 1.0, "synchronous: one request at a time"
    if kind == "concurrent":
        streams = strategy.get("streams")
        if not is_count(streams, 1):
            raise ImportFileError(f"{where}.streams is {shown(streams)}; a concurrent strategy has a count >= 1")
        return "concurrency", float(streams), f"concurrent: {streams} stream{'s' if streams > 1 else ''}"
    if kind == "throughput":
        if is_count(cap, 1):
            return "concurrency", float(cap), f"throughput: as fast as it could, at most {cap} in flight"
        if mean_concurrency is None or mean_concurrency < 0.5:
            raise ImportFileError(f"{where}: a throughput strategy without max_concurrency, and no "
                                  "request_concurrency to label it by")
        users = round(mean_concurrency)
        return "concurrency", float(users), (f"throughput: as fast as it could, no cap; labelled by its mean "
                                             f"concurrency, {mean_concurrency:.1f}")
    if kind in ("constant", "poisson"):
        rate = strategy.get("rate")
        if not is_number(rate) or rate <= 0:
            raise ImportFileError(f"{where}.rate is {shown(rate)}; a {kind} strategy has requests/s > 0")
        spacing = "evenly spaced" if kind == "constant" else "Poisson arrivals"
        return "rate", float(rate), f"{kind}: {rate:g} requests/s, {spacing}{capped}"
    if kind == "trace":
        return "trace", 1.0, "trace: replayed at its own pace"
    raise ImportFileError(f"{where}.type_ is {shown(kind)}; expected synchronous, concurrent, throughput, "
                          "constant, poisson or trace")


def _successful(metrics: dict[str, Any], name: str, where: str, status: str = "successful") -> Distribution:
    """A metric's distribution over the requests of one status; empty where the file has none."""
    by_status = metrics.get(name)
    if by_status is None:
        return Distribution()
    if not isinstance(by_status, dict):
        raise ImportFileError(f"{where}.metrics.{name} is {shown(by_status)}; expected a distribution by status")
    summary = by_status.get(status)
    if summary is None:
        return Distribution()
    if not isinstance(summary, dict):
        raise ImportFileError(f"{where}.metrics.{name}.{status} is {shown(summary)}; expected a distribution")
    percentiles = part(summary, "percentiles")

    def get(value: Any, field: str) -> float | None:
        if value is None:
            return None
        if not is_number(value):
            raise ImportFileError(f"{where}.metrics.{name}.{status}.{field} is {shown(value)}; expected a number")
        return float(value)

    median = summary.get("median", percentiles.get("p50"))
    return Distribution(mean=get(summary.get("mean"), "mean"), p50=get(median, "median"),
                        **{p: get(percentiles.get(p), f"percentiles.{p}") for p in ("p90", "p95", "p99")})


def _mean(metrics: dict[str, Any], name: str, where: str) -> float:
    mean = _successful(metrics, name, where).mean
    if mean is None:
        raise ImportFileError(f"{where}.metrics.{name}.successful.mean is missing; {WHAT} gives it for every "
                              "benchmark")
    return mean


def _object(raw: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    value = raw.get(name)
    if not isinstance(value, dict):
        raise ImportFileError(f"{where}.{name} is {shown(value)}; expected an object")
    return value
