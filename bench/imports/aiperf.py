"""aiperf's `profile_export_aiperf.json` (its JSON export, schema 1.x): one level, the run's profiling phase.

The fields read (aiperf's names): `aiperf_version`; each a metric result with its `unit` and `avg`, `p50`, `p90`,
`p95`, `p99`: `request_count` and `error_request_count` (requests), `benchmark_duration` (a time),
`request_throughput` (requests/sec), `output_token_throughput` (tokens/sec), `total_isl` and `total_osl`, and
the latencies `time_to_first_token`, `inter_token_latency`, `inter_chunk_latency`, `request_latency`,
`input_sequence_length`, `output_sequence_length` and `goodput` where set; `was_cancelled`, `is_complete` and
`incomplete_reason`. The load comes from `input_config`: its `loadgen` (`concurrency`, `request_rate`) as aiperf
documents its user config, or the `phases` aiperf 0.13 writes (`type` concurrency with `concurrency`, poisson,
constant, gamma or user_centric with `rate`, fixed_schedule), the warm-up left out. The model is
`input_config.endpoint.model_names[0]` or `input_config.models`.

aiperf's ITL is a request's (latency - TTFT) / (output tokens - 1), which is this toolkit's TPOT; its inter-chunk
latency is our ICL. The per-request records it writes beside (`profile_export.jsonl`) are not read.
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

WHAT = "aiperf's profile_export_aiperf.json"
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "sec": 1000.0, "s": 1000.0}
PER_SECOND = {"requests/sec": 1.0, "requests/s": 1.0}
TOKENS_PER_SECOND = {"tokens/sec": 1.0, "tokens/s": 1.0}
COUNT = {"requests": 1.0}
TOKENS = {"tokens": 1.0}
RATE_PHASES = ("poisson", "constant", "gamma", "user_centric")
NOT_GIVEN = ("no per-request records (aiperf's profile_export.jsonl is not read): figures as the file gives "
             "them, SLO attainment not measured, no client self-check",
             "aiperf's ITL (a request's mean gap after its first token) is read as this toolkit's TPOT, its "
             "inter-chunk latency as our ICL; the gaps between single tokens (ITL) are not in the file")
LATENCIES = {"time_to_first_token": "TTFT", "inter_token_latency": "TPOT", "inter_chunk_latency": "ICL",
             "request_latency": "E2E"}


def read_aiperf(path: Path, run_id: str = "imported") -> list[ImportedLevel]:
    """The one level an aiperf export holds."""
    raw = load_json(path, WHAT)
    metrics = _Metrics(raw, path)
    version = str(raw["aiperf_version"]) if raw.get("aiperf_version") else None
    config = raw.get("input_config")
    if not isinstance(config, dict):
        raise ImportFileError(f"{path}: input_config is {shown(config)}; {WHAT} holds the run's configuration "
                              "there, and the load it ran is read from it")
    kind, target, how = _load(config, f"{path}: input_config")
    label = load_label(kind, target)
    notes = [f"imported from aiperf{' ' + version if version else ''} ({path.name}): {how}", *NOT_GIVEN]
    if raw.get("was_cancelled") is True or raw.get("is_complete") is False:
        reason = raw.get("incomplete_reason") or "cancelled"
        notes.append(f"aiperf says the run did not finish ({reason}): its figures cover the part it ran")
    missing = [name for name in (*LATENCIES, "input_sequence_length") if raw.get(name) is None]
    if missing:
        notes.append(f"the file gives no {', '.join(missing)}: not known for this level")

    num_ok = round(metrics.required("request_count", COUNT))
    num_failed = round(metrics.avg("error_request_count", COUNT) or 0.0)
    duration_s = metrics.required("benchmark_duration", TO_MS) / 1000
    if duration_s <= 0:
        raise ImportFileError(f"{path}: benchmark_duration.avg is {duration_s:g} s; expected the time it ran, > 0")
    mean_input = metrics.avg("input_sequence_length", TOKENS) or 0.0
    mean_output = metrics.required("output_sequence_length", TOKENS)
    output_per_s = metrics.required("output_token_throughput", TOKENS_PER_SECOND)
    total_isl, total_osl = metrics.avg("total_isl", TOKENS), metrics.avg("total_osl", TOKENS)
    total_tokens = (total_isl + total_osl if total_isl is not None and total_osl is not None
                    else (mean_input + mean_output) * num_ok)
    request_per_s = metrics.required("request_throughput", PER_SECOND)
    latencies = {short.lower(): metrics.distribution(name, TO_MS) for name, short in LATENCIES.items()}
    e2e_mean = latencies["e2e"].mean
    in_flight = target if kind == "concurrency" or e2e_mean is None else request_per_s * e2e_mean / 1000  # Little
    summary = aggregate_summary("endpoint", Aggregates(
        label=label, kind=kind, target=target, num_ok=num_ok, num_failed=num_failed, duration_s=duration_s,
        request_per_s=request_per_s, output_tokens_per_s=output_per_s, total_tokens_per_s=total_tokens / duration_s,
        latency=latency(**latencies), mean_input_tokens=mean_input, mean_output_tokens=mean_output,
        mean_in_flight=in_flight,
        goodput_request_per_s=metrics.avg("goodput", PER_SECOND)), notes)
    return [ImportedLevel(label, "endpoint", _model(config), version, summary=summary, notes=tuple(notes))]


class _Metrics:
    """The file's metric results, read in this toolkit's units; errors name the field."""

    def __init__(self, raw: dict[str, Any], path: Path) -> None:
        self.raw, self.path = raw, path

    def _result(self, name: str, units: dict[str, float], required: bool) -> tuple[dict[str, Any], float] | None:
        result = self.raw.get(name)
        if result is None:
            if required:
                raise ImportFileError(f"{self.path}: {name} is missing; {WHAT} gives it for every run")
            return None
        if not isinstance(result, dict):
            raise ImportFileError(f"{self.path}: {name} is {shown(result)}; expected a metric result (unit, avg, "
                                  "p50, ...)")
        unit = result.get("unit")
        if not isinstance(unit, str) or unit not in units:
            raise ImportFileError(f"{self.path}: {name}.unit is {shown(unit)}; expected {' or '.join(units)}")
        return result, units[unit]

    def _number(self, result: dict[str, Any], name: str, field: str, scale: float) -> float | None:
        value = result.get(field)
        if value is None:
            return None
        if not is_number(value):
            raise ImportFileError(f"{self.path}: {name}.{field} is {shown(value)}; expected a number")
        return float(value) * scale

    def avg(self, name: str, units: dict[str, float]) -> float | None:
        found = self._result(name, units, required=False)
        return None if found is None else self._number(found[0], name, "avg", found[1])

    def required(self, name: str, units: dict[str, float]) -> float:
        """The average of a metric every export gives."""
        result, scale = self._result(name, units, required=True) or ({}, 1.0)
        value = self._number(result, name, "avg", scale)
        if value is None:
            raise ImportFileError(f"{self.path}: {name}.avg is missing; expected a number")
        return value

    def distribution(self, name: str, units: dict[str, float]) -> Distribution:
        found = self._result(name, units, required=False)
        if found is None:
            return Distribution()
        result, scale = found
        return Distribution(*(self._number(result, name, field, scale) for field in ("avg", "p50", "p90", "p95",
                                                                                     "p99")))


def _load(config: dict[str, Any], where: str) -> tuple[str, float, str]:
    """The load the run's configuration names, as this toolkit's kind, target and a sentence."""
    loadgen = config.get("loadgen")
    if isinstance(loadgen, dict):
        concurrency, rate = loadgen.get("concurrency"), loadgen.get("request_rate")
        if is_number(rate) and rate > 0:
            capped = f", at most {concurrency} in flight" if is_count(concurrency, 1) else ""
            return "rate", float(rate), f"{rate:g} requests/s{capped}"
        if is_count(concurrency, 1):
            return "concurrency", float(concurrency), f"{concurrency} requests at once"
        raise ImportFileError(f"{where}.loadgen: neither concurrency ({shown(concurrency)}) nor request_rate "
                              f"({shown(rate)}) names a load; expected a concurrency >= 1 or a request_rate > 0")
    phases = config.get("phases")
    if isinstance(phases, dict):  # a single phase, as a config may give it
        phases = [phases]
    if not isinstance(phases, list):
        raise ImportFileError(f"{where}: no loadgen and no phases; expected input_config.loadgen (concurrency, "
                              "request_rate) or input_config.phases")
    measured = [(i, p) for i, p in enumerate(phases) if isinstance(p, dict) and not _warmup(p)]
    if len(measured) != 1:
        raise ImportFileError(f"{where}.phases has {len(measured)} phases past the warm-up; expected one, since "
                              "the export's figures cover the run as a whole")
    index, phase = measured[0]
    kind, concurrency, rate = phase.get("type"), phase.get("concurrency"), phase.get("rate")
    at = f"{where}.phases[{index}]"
    if kind == "concurrency":
        users = concurrency if concurrency is not None else 1  # aiperf's default
        if not is_count(users, 1):
            raise ImportFileError(f"{at}.concurrency is {shown(concurrency)}; expected a count >= 1")
        return "concurrency", float(users), f"concurrency: {users} requests at once"
    if kind in RATE_PHASES:
        if not is_number(rate) or rate <= 0:
            raise ImportFileError(f"{at}.rate is {shown(rate)}; a {kind} phase at a scalar requests/s > 0 is "
                                  "what a level can be (a rate series is not)")
        capped = f", at most {concurrency} in flight" if is_count(concurrency, 1) else ""
        return "rate", float(rate), f"{kind}: {rate:g} requests/s{capped}"
    if kind == "fixed_schedule":
        return "trace", 1.0, "fixed_schedule: replayed at its timestamps"
    raise ImportFileError(f"{at}.type is {shown(kind)}; expected concurrency, {', '.join(RATE_PHASES)} or "
                          "fixed_schedule")


def _warmup(phase: dict[str, Any]) -> bool:
    return bool(phase.get("exclude_from_results")) or phase.get("kind") == "warmup" or phase.get("name") == "warmup"


def _model(config: dict[str, Any]) -> str | None:
    """The model the run asked for: the documented `endpoint.model_names`, or 0.13's `models` (a name, a list,
    or items with a name each)."""
    models = part(config, "endpoint").get("model_names") or config.get("models")
    if isinstance(models, dict):
        models = [item.get("name") for item in models.get("items") or [] if isinstance(item, dict)]
    if isinstance(models, str):
        return models
    if isinstance(models, list) and models and isinstance(models[0], str):
        return models[0]
    return None
