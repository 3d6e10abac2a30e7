"""`vllm bench serve --save-result` JSON, one file per concurrency or rate, as a level.

The fields read (vLLM's own names): `backend`, `model_id`, `date`, `num_prompts`, `request_rate` (a number or
"inf"), `max_concurrency`, `duration`, `completed`, `failed`, `total_input_tokens`, `total_output_tokens`,
`request_throughput`, `request_goodput`, `output_throughput`, `total_token_throughput`, and for each of TTFT,
TPOT, ITL and E2EL `mean_<m>_ms`, `median_<m>_ms` and `p<P>_<m>_ms` (the percentiles it was asked for). With
`--save-detailed` the file also holds one entry per request (`ttfts`, `itls`, `latencies`, `input_lens`,
`output_lens`, `start_times`, `errors`): the level is then rebuilt request by request and summarized as a
measured one is, SLO attainment included. Without them, the level has the file's aggregates only, and its notes
say what is missing. vLLM's ITL is the gap between streamed chunks, which is this toolkit's ICL; its TPOT is
ours.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.types import (
    Distribution,
    Latency,
    LevelSummary,
    RequestCounts,
    RequestRecord,
    Throughput,
    Tokens,
)

METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "icl_ms", "e2el": "e2e_ms"}  # vLLM's -> our Latency field
PER_REQUEST = ("ttfts", "itls", "latencies", "input_lens", "output_lens", "errors")


class ImportFileError(ValueError):
    """A file that is not what `--from` says; the message names the file and the field."""


@dataclass(frozen=True)
class ImportedLevel:
    """One level read from a peer's file: its label, and either its requests (to summarize as measured ones) or
    its summary from the file's aggregates; what the file did not give, in `notes`."""

    label: str
    engine: str
    model: str | None
    tool_version: str | None
    records: tuple[RequestRecord, ...] = ()
    summary: LevelSummary | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def read_vllm(path: Path, run_id: str = "imported") -> ImportedLevel:
    raw = _load(path)
    for name in ("completed", "duration", "output_throughput", "request_throughput", "total_token_throughput"):
        if not isinstance(raw.get(name), int | float):
            raise ImportFileError(f"{path}: {name} is {raw.get(name)!r}; a `vllm bench serve --save-result` file "
                                  "has it as a number")
    label, kind, target, how = _level(raw, path)
    engine, model = str(raw.get("backend") or "vllm"), raw.get("model_id")
    notes = [f"imported from vllm bench serve ({path.name}): {how}",
             "vLLM's ITL is the gap between streamed chunks (this toolkit's ICL)"]
    if all(isinstance(raw.get(name), list) for name in PER_REQUEST):
        records = _records(raw, path, label, engine, run_id)
        return ImportedLevel(label, engine, model, None, records=records, notes=tuple(notes))
    notes += ["no per-request records in the file (saved without --save-detailed): figures as the file gives them, "
              "SLO attainment not measured, no client self-check"]
    return ImportedLevel(label, engine, model, None, summary=_summary(raw, label, kind, target, engine, notes),
                         notes=tuple(notes))


def _load(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ImportFileError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(raw, dict):
        raise ImportFileError(f"{path}: expected a JSON object (a `vllm bench serve --save-result` file)")
    return raw


def _level(raw: dict[str, Any], path: Path) -> tuple[str, str, float, str]:
    concurrency, rate = raw.get("max_concurrency"), raw.get("request_rate")
    if isinstance(concurrency, int) and concurrency >= 1:
        how = f"at most {concurrency} requests at once" + (f", {rate} requests/s" if rate not in (None, "inf") else "")
        return f"c{concurrency}", "concurrency", float(concurrency), how
    if isinstance(rate, int | float) and rate > 0 and math.isfinite(rate):
        return f"r{rate:g}", "rate", float(rate), f"{rate:g} requests/s, no cap on those in flight"
    prompts = raw.get("num_prompts")
    if isinstance(prompts, int) and prompts >= 1:  # request_rate inf, no cap: every request sent at once
        return f"c{prompts}", "concurrency", float(prompts), f"all {prompts} requests sent at once"
    raise ImportFileError(f"{path}: max_concurrency, request_rate and num_prompts say no load (expected a "
                          "max_concurrency >= 1, a finite request_rate > 0, or num_prompts)")


def _records(raw: dict[str, Any], path: Path, label: str, engine: str, run_id: str) -> tuple[RequestRecord, ...]:
    lengths = {name: len(raw[name]) for name in PER_REQUEST}
    if len(set(lengths.values())) != 1:
        raise ImportFileError(f"{path}: the per-request lists differ in length ({lengths})")
    starts = raw.get("start_times") if isinstance(raw.get("start_times"), list) else None
    origin = min(starts) if starts else 0.0
    records = []
    for i in range(lengths["ttfts"]):
        error = raw["errors"][i]
        ok = not error
        ttft, itls = raw["ttfts"][i], raw["itls"][i] or []
        times = [ttft] if ok and ttft else []
        for gap in itls if times else []:
            times.append(times[-1] + gap)
        send = (starts[i] - origin) if starts else 0.0
        records.append(RequestRecord(
            run_id=run_id, engine=engine, level=label, request_id=i, send_s=send, chunk_times_s=times,
            chunk_tokens=[1] * len(times), end_s=send + (raw["latencies"][i] or 0.0),
            prompt_tokens=raw["input_lens"][i], output_tokens=raw["output_lens"][i] if ok else 0,
            server_output_tokens=raw["output_lens"][i] if ok else None, token_count_source="usage",
            ok=ok, error_kind=None if ok else "imported_error", error_message=str(error)[:500] if error else None))
    return tuple(records)


def _summary(raw: dict[str, Any], label: str, kind: str, target: float, engine: str,
             notes: list[str]) -> LevelSummary:
    completed = int(raw["completed"])
    failed = int(raw["failed"]) if isinstance(raw.get("failed"), int) else max(
        0, int(raw.get("num_prompts") or completed) - completed)
    total = completed + failed
    latency = {ours: _distribution(raw, theirs) for theirs, ours in METRICS.items()}
    goodput = raw.get("request_goodput")
    return LevelSummary(
        engine=engine, level=label, kind=kind, target=target, base_level=label,
        requests=RequestCounts(num_requests=total, num_ok=completed, num_failed=failed,
                               failure_rate=failed / total if total else 0.0, failures_by_kind={}),
        throughput=Throughput(
            window_s=float(raw["duration"]), is_steady_window=False, request_per_s=raw["request_throughput"],
            output_tokens_per_s=raw["output_throughput"], total_tokens_per_s=raw["total_token_throughput"],
            run_request_per_s=raw["request_throughput"], run_output_tokens_per_s=raw["output_throughput"],
            goodput_request_per_s=goodput if isinstance(goodput, int | float) else raw["request_throughput"],
            slo_attainment=1.0, mean_in_flight=float(raw.get("max_concurrency") or target)),
        latency=Latency(ttft_ms=latency["ttft_ms"], itl_ms=latency["icl_ms"], icl_ms=latency["icl_ms"],
                        tpot_ms=latency["tpot_ms"], e2e_ms=latency["e2e_ms"]),
        tokens=Tokens(mean_input_tokens=(raw.get("total_input_tokens") or 0) / completed if completed else 0.0,
                      mean_output_tokens=(raw.get("total_output_tokens") or 0) / completed if completed else 0.0),
        notes=list(notes),
    )


def _distribution(raw: dict[str, Any], metric: str) -> Distribution:
    def get(key: str) -> float | None:
        value = raw.get(key)
        return float(value) if isinstance(value, int | float) else None

    return Distribution(mean=get(f"mean_{metric}_ms"), p50=get(f"median_{metric}_ms") or get(f"p50_{metric}_ms"),
                        p90=get(f"p90_{metric}_ms"), p95=get(f"p95_{metric}_ms"), p99=get(f"p99_{metric}_ms"))
