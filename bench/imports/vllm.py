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

from collections.abc import Callable
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
    shown,
)
from loadgen.types import Distribution, LevelSummary, RequestRecord

METRICS = ("ttft", "tpot", "itl", "e2el")
PER_REQUEST = ("ttfts", "itls", "latencies", "input_lens", "output_lens", "errors")
WHAT = "a `vllm bench serve --save-result` file"


def read_vllm(path: Path, run_id: str = "imported") -> list[ImportedLevel]:
    """The one level a `vllm bench serve --save-result` file holds."""
    raw = load_json(path, WHAT)
    for name in ("completed", "duration", "output_throughput", "request_throughput", "total_token_throughput"):
        if not is_number(raw.get(name)):
            raise ImportFileError(f"{path}: {name} is {raw.get(name)!r}; {WHAT} has it as a number")
    label, kind, target, how = _level(raw, path)
    engine, model = str(raw.get("backend") or "vllm"), raw.get("model_id")
    if model is not None and not isinstance(model, str):
        raise ImportFileError(f"{path}: model_id is {shown(model)}; {WHAT} has the model's name there")
    notes = [f"imported from vllm bench serve ({path.name}): {how}",
             "vLLM's ITL is the gap between streamed chunks (this toolkit's ICL)"]
    if all(isinstance(raw.get(name), list) for name in PER_REQUEST):
        records = _records(raw, path, label, kind, engine, run_id)
        return [ImportedLevel(label, engine, model, None, records=records, notes=tuple(notes))]
    notes += ["no per-request records in the file (saved without --save-detailed): figures as the file gives them, "
              "SLO attainment not measured, no client self-check"]
    return [ImportedLevel(label, engine, model, None, summary=_summary(raw, path, label, kind, target, engine, notes),
                          notes=tuple(notes))]


def _level(raw: dict[str, Any], path: Path) -> tuple[str, str, float, str]:
    concurrency, rate = raw.get("max_concurrency"), raw.get("request_rate")
    if is_count(concurrency, 1):
        how = f"at most {concurrency} requests at once" + (f", {rate} requests/s" if rate not in (None, "inf") else "")
        return f"c{concurrency}", "concurrency", float(concurrency), how
    if is_number(rate) and rate > 0:
        return f"r{rate:g}", "rate", float(rate), f"{rate:g} requests/s, no cap on those in flight"
    prompts = raw.get("num_prompts")
    if is_count(prompts, 1):  # request_rate inf, no cap: every request sent at once
        return f"c{prompts}", "concurrency", float(prompts), f"all {prompts} requests sent at once"
    raise ImportFileError(f"{path}: max_concurrency, request_rate and num_prompts say no load (expected a "
                          "max_concurrency >= 1, a finite request_rate > 0, or num_prompts)")


def _records(raw: dict[str, Any], path: Path, label: str, kind: str, engine: str,
             run_id: str) -> tuple[RequestRecord, ...]:
    lengths = {name: len(raw[name]) for name in PER_REQUEST}
    if len(set(lengths.values())) != 1:
        raise ImportFileError(f"{path}: the per-request lists differ in length ({lengths})")
    starts = raw.get("start_times") if isinstance(raw.get("start_times"), list) else None
    _check_entries(raw, path, lengths["ttfts"], starts)
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
            scheduled_s=send if kind == "rate" else None,  # an arrival rate: sent when its schedule said
            chunk_tokens=[1] * len(times), end_s=send + (raw["latencies"][i] or 0.0),
            prompt_tokens=raw["input_lens"][i], output_tokens=raw["output_lens"][i] if ok else 0,
            server_output_tokens=raw["output_lens"][i] if ok else None, token_count_source="usage",
            ok=ok, error_kind=None if ok else "imported_error", error_message=str(error)[:500] if error else None))
    return tuple(records)


ENTRIES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "ttfts": (lambda v: v is None or _seconds(v), "seconds >= 0"),
    "latencies": (lambda v: v is None or _seconds(v), "seconds >= 0"),
    "itls": (lambda v: v is None or (isinstance(v, list) and all(_seconds(gap) for gap in v)),
             "a list of seconds >= 0"),
    "input_lens": (lambda v: is_count(v), "a token count >= 0"),
    "output_lens": (lambda v: is_count(v), "a token count >= 0"),
    "errors": (lambda v: v is None or isinstance(v, str), "a string (empty: no error)"),
    "start_times": (is_number, "a time in seconds"),
}


def _seconds(value: Any) -> bool:
    return is_number(value) and value >= 0


def _check_entries(raw: dict[str, Any], path: Path, count: int, starts: list[Any] | None) -> None:
    """Each request's entry in each per-request list is of its kind, so a record is made of figures only."""
    if starts is not None and len(starts) != count:
        raise ImportFileError(f"{path}: start_times has {len(starts)} entries; the per-request lists have {count}")
    for name, (is_valid, wanted) in ENTRIES.items():
        for i, value in enumerate(raw[name] if name != "start_times" else starts or []):
            if not is_valid(value):
                raise ImportFileError(f"{path}: {name}[{i}] is {shown(value)}; expected {wanted}")


def _summary(raw: dict[str, Any], path: Path, label: str, kind: str, target: float, engine: str,
             notes: list[str]) -> LevelSummary:
    completed, failed, prompts = raw["completed"], raw.get("failed"), raw.get("num_prompts")
    if not is_count(completed):
        raise ImportFileError(f"{path}: completed is {shown(completed)}; expected a count of requests >= 0")
    failed = failed if is_count(failed) else max(0, (prompts if is_count(prompts) else completed) - completed)
    ttft, tpot, itl, e2e = (_distribution(raw, metric) for metric in METRICS)
    if any(d.p95 is None for d in (ttft, tpot, itl, e2e)):
        notes = [*notes, "the file gives no p95 for some latencies (vllm bench serve saves the percentiles "
                         "--metric-percentiles names; 50,90,95,99 saves these)"]
    goodput = raw.get("request_goodput")
    return aggregate_summary(engine, Aggregates(
        label=label, kind=kind, target=target, num_ok=completed, num_failed=failed,
        duration_s=float(raw["duration"]), request_per_s=raw["request_throughput"],
        output_tokens_per_s=raw["output_throughput"], total_tokens_per_s=raw["total_token_throughput"],
        latency=latency(ttft=ttft, itl=itl, icl=itl, tpot=tpot, e2e=e2e),  # vLLM's ITL: a gap between chunks
        mean_input_tokens=_total(raw, "total_input_tokens") / completed if completed else 0.0,
        mean_output_tokens=_total(raw, "total_output_tokens") / completed if completed else 0.0,
        mean_in_flight=float(cap) if is_count(cap := raw.get("max_concurrency"), 1) else target,
        goodput_request_per_s=goodput if is_number(goodput) else None), notes)


def _total(raw: dict[str, Any], name: str) -> float:
    """A token total the file may lack (0 then, as vLLM writes it for no request)."""
    value = raw.get(name)
    return float(value) if is_number(value) else 0.0


def _distribution(raw: dict[str, Any], metric: str) -> Distribution:
    def get(key: str) -> float | None:
        value = raw.get(key)
        return float(value) if is_number(value) else None

    return Distribution(mean=get(f"mean_{metric}_ms"), p50=get(f"median_{metric}_ms") or get(f"p50_{metric}_ms"),
                        p90=get(f"p90_{metric}_ms"), p95=get(f"p95_{metric}_ms"), p99=get(f"p99_{metric}_ms"))
