"""A level's records as columns: the same summary whether built from record objects or read a row at a time
from requests.jsonl (older rows without the newer fields included), in a few bytes per token."""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import orjson

from bench.run.rundir import summarize_run
from loadgen.columns import columns_by_level, columns_of
from loadgen.metrics import summarize, summarize_columns
from loadgen.types import SLO, RequestRecord


def varied_records(n: int = 400, seed: int = 3) -> list[RequestRecord]:
    """Closed-loop users with every kind of record: warm-ups, failures without chunks, throttled and retried
    requests, multi-token chunks, turns, cached and reasoning counts, and fields left unset."""
    rng = np.random.default_rng(seed)
    records, clock = [], np.zeros(8)
    for i in range(n):
        user = i % 8
        chunks = int(rng.integers(1, 12))
        times = np.cumsum(rng.exponential(0.01, chunks)) + 0.05
        ok = i % 17 != 0
        throttled = i % 13 == 0
        send = float(clock[user])
        records.append(RequestRecord(
            run_id="r", engine="e", level="c8", request_id=i, send_s=send, dispatch_s=send - 1e-4, user=user,
            is_warmup=i < 8, turn=1 + i % 3 if i % 2 else None,
            chunk_times_s=times.tolist() if ok else [], chunk_tokens=rng.integers(1, 4, chunks).tolist() if ok else [],
            end_s=send + float(times[-1]) if i % 23 else None,
            prompt_tokens=int(rng.integers(10, 90)) if i % 5 else None,
            output_tokens=chunks if ok else 0, cached_tokens=16 if i % 4 == 0 else None,
            server_output_tokens=chunks + (i % 7 == 0) if ok and i % 3 else None, token_count_source="server_usage",
            max_tokens=12 if i % 6 else None, ok=ok,
            error_kind=None if ok else ("throttled" if throttled else "timeout"),
            attempts=2 if throttled else 1, throttled_attempts=1 if throttled else 0,
            first_send_s=send - 0.2 if throttled else None, first_visible_s=float(times[0]) + 0.01 if i % 2 else None,
            reasoning_tokens=3 if i % 9 == 0 else None, connect_ms=0.5 if i < 16 else None))
        clock[user] = send + float(times[-1]) + 0.002
    return records


def same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def test_records_and_rows_give_exactly_the_same_summary(tmp_path) -> None:
    records = varied_records()
    slo = SLO(ttft_ms=80, tpot_ms=15, e2e_ms=200)
    (tmp_path / "run.json").write_text('{"run_id": "r", "status": "complete", "levels": ["c8"]}')
    (tmp_path / "levels.jsonl").write_text('{"level": "c8"}\n')  # it finished (no client check on record)
    with (tmp_path / "requests.jsonl").open("wb") as f:
        for record in records:
            f.write(orjson.dumps(asdict(record)) + b"\n")
    from_records = summarize(records, slo).to_json()
    (from_rows,) = [s.to_json() for s in summarize_run(tmp_path, slo)]
    assert same(from_records, from_rows), [k for k in from_records if not same(from_records[k], from_rows[k])]
    assert from_records["num_failed"] > 0 and from_records["num_throttled"] > 0 and from_records["ttfvt_ms"]["p50"]


def test_a_row_of_an_older_version_reads_as_its_record_would() -> None:
    row = {"run_id": "r", "engine": "e", "level": "c1", "request_id": 0, "send_s": 1.0, "chunk_times_s": [0.1, 0.2],
           "chunk_tokens": [1, 1], "end_s": 1.2, "output_tokens": 2, "ok": True}  # no attempts, throttling, ...
    (columns,) = columns_by_level([row]).values()
    record = columns_of([RequestRecord.from_json(row)])
    assert columns.counts["attempts"].tolist() == record.counts["attempts"].tolist() == [1]
    assert same(summarize_columns(columns).to_json(), summarize([RequestRecord.from_json(row)]).to_json())
    assert summarize_columns(columns).latency.itl_ms.p50 == 100.0


def test_columns_hold_a_few_bytes_per_token() -> None:
    records = [r for r in varied_records(2000) if not r.is_warmup]
    columns = columns_of(records)
    tokens = sum(len(r.chunk_times_s) for r in records)
    per_token = (columns.chunk_times_s.nbytes + columns.chunk_tokens.nbytes) / tokens
    per_request = sum(a.nbytes for a in (*columns.times.values(), *columns.counts.values())) / len(records)
    assert per_token == 12 and per_request == 8 * 25  # a float64 time and an int32 count a chunk; 25 numbers a request
