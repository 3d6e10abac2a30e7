"""Metrics from hand-written timestamps, against the values vLLM's published formulas give.

vLLM (benchmarks/serve): ttft = first token - start; tpot = (latency - ttft) / (output_len - 1);
itl = gaps between successive chunks, pooled; e2el = latency; percentiles with numpy's linear method.
The expected values below were worked out by hand from those formulas.
"""

from __future__ import annotations

import pytest

from loadgen.metrics import summarize
from loadgen.types import SLO, ClientCheck, RequestRecord


def record(send_s: float, chunk_times_s: list[float], chunk_tokens: list[int] | None = None, user: int = 0,
           ok: bool = True, **fields) -> RequestRecord:
    tokens = chunk_tokens or [1] * len(chunk_times_s)
    return RequestRecord(
        run_id="r", engine="e", level="c1", request_id=int(send_s * 1000) + user, send_s=send_s, user=user,
        chunk_times_s=chunk_times_s, chunk_tokens=tokens, end_s=send_s + (chunk_times_s[-1] if chunk_times_s else 0),
        output_tokens=sum(tokens), prompt_tokens=10, ok=ok, max_tokens=sum(tokens), **fields,
    )


GOLDEN = [
    record(0.0, [0.25, 0.30, 0.36, 0.43]),
    record(0.43, [0.10, 0.12, 0.15, 0.20, 0.26, 0.33]),
    record(0.76, [0.5, 0.9]),
]


def test_golden_ttft_tpot_itl_e2e_match_vllm_formulas() -> None:
    s = summarize(GOLDEN)
    latency = s.latency
    ttft = latency.ttft_ms
    assert (ttft.mean, ttft.p50, ttft.p99) == pytest.approx((283.3333333, 250.0, 495.0))
    tpot = latency.tpot_ms
    assert (tpot.mean, tpot.p50, tpot.p99) == pytest.approx((168.6666667, 60.0, 393.2))
    assert (latency.itl_ms.mean, latency.itl_ms.p50, latency.itl_ms.p99) == pytest.approx((90.0, 60.0, 373.6))
    assert (latency.e2e_ms.mean, latency.e2e_ms.p50, latency.e2e_ms.p99) == pytest.approx((553.3333333, 430.0, 890.6))
    assert latency.icl_ms == latency.itl_ms  # one token per chunk: per-token and per-chunk gaps are the same


def test_latency_minus_ttft_equals_sum_of_itl_for_every_request() -> None:
    for r in [*GOLDEN, record(0.0, [0.1, 0.2, 0.3], [2, 4, 4])]:
        s = summarize([r])
        itl_sum = s.latency.itl_ms.mean * (r.output_tokens - r.chunk_tokens[0])
        assert s.latency.e2e_ms.mean - s.latency.ttft_ms.mean == pytest.approx(itl_sum)


def test_multi_token_chunks_spread_their_gap_per_token_while_icl_keeps_the_raw_gap() -> None:
    s = summarize([record(0.0, [0.1, 0.2, 0.3], [1, 4, 4])])
    assert s.latency.itl_ms.p50 == pytest.approx(25.0) and s.latency.itl_ms.p99 == pytest.approx(25.0)
    assert s.latency.icl_ms.p50 == pytest.approx(100.0)
    assert s.latency.tpot_ms.p50 == pytest.approx(200 / 8)
    assert s.tokens.mean_output_tokens == 9


def test_closed_loop_steady_window_runs_from_all_users_active_to_first_user_done() -> None:
    records = [
        record(0.0, [0.1, 1.0], user=0), record(1.0, [0.1, 1.0], user=0),
        record(0.5, [0.1, 1.0], user=1), record(1.5, [0.1, 1.5], user=1),
    ]
    s = summarize(records)
    assert s.throughput.window_s == pytest.approx(1.5) and s.throughput.is_steady_window
    # tokens arriving in [0.5, 2.0]: 1.0, 1.1, 2.0 (user 0) and 0.6, 1.5, 1.6 (user 1)
    assert s.throughput.output_tokens_per_s == pytest.approx(6 / 1.5)
    # ends at 1.0 and 2.0 (user 0), 1.5 (user 1); 3.0 is out
    assert s.throughput.request_per_s == pytest.approx(3 / 1.5)
    assert s.throughput.mean_in_flight == pytest.approx(2.0)


def test_failures_are_excluded_from_throughput_and_count_against_attainment() -> None:
    good = [record(0.0, [0.1, 0.2]), record(0.2, [0.1, 0.2])]
    bad = record(0.0, [], ok=False, error_kind="http_error", user=1)
    bad.end_s = 0.05
    s = summarize([*good, bad])
    assert (s.requests.num_ok, s.requests.num_failed) == (2, 1)
    assert s.requests.failure_rate == pytest.approx(1 / 3)
    assert s.requests.failures_by_kind == {"http_error": 1}
    assert s.throughput.slo_attainment == pytest.approx(2 / 3)
    assert s.throughput.run_output_tokens_per_s == pytest.approx(4 / 0.4)


def test_goodput_counts_only_requests_meeting_every_slo() -> None:
    slo = SLO(ttft_ms=200, tpot_ms=100)
    records = [  # one user, one request after the other: the window is 0 .. 1.05 s
        record(0.0, [0.1, 0.15, 0.2]),      # ttft 100, tpot 50: meets
        record(0.2, [0.3, 0.35]),           # ttft 300: misses
        record(0.55, [0.1, 0.5]),           # tpot 400: misses
    ]
    s = summarize(records, slo)
    assert s.throughput.slo_attainment == pytest.approx(1 / 3)
    assert s.throughput.request_per_s == pytest.approx(3 / 1.05)
    assert s.throughput.goodput_request_per_s == pytest.approx(1 / 1.05)


def test_open_loop_latencies_from_schedule_include_the_clients_lateness() -> None:
    late = record(0.5, [0.1, 0.2], scheduled_s=0.0)
    on_time = record(1.0, [0.1, 0.2], scheduled_s=1.0)
    s = summarize([late, on_time])
    assert s.kind == "rate"
    assert s.latency.ttft_ms.p50 == pytest.approx(100)
    assert s.latency.ttft_from_schedule_ms.mean == pytest.approx((600 + 100) / 2)
    assert s.latency.schedule_lag_ms.mean == pytest.approx(250)


def test_a_client_that_fell_behind_marks_the_level_invalid() -> None:
    busy = ClientCheck(loop_lag_p50_ms=5, loop_lag_p99_ms=80, loop_lag_max_ms=120, client_cpu_fraction=0.99)
    s = summarize(GOLDEN, client=busy)
    assert not s.is_valid
    assert any("lagged" in reason for reason in s.invalid_reasons)
    assert any("core" in reason for reason in s.invalid_reasons)


def test_time_spent_waiting_for_a_send_time_is_not_counted_as_a_busy_client() -> None:
    waiting = ClientCheck(loop_lag_p50_ms=0.1, loop_lag_p99_ms=1, loop_lag_max_ms=2, client_cpu_fraction=0.99,
                          waiting_fraction=0.4)
    assert summarize(GOLDEN, client=waiting).is_valid
    busy = ClientCheck(loop_lag_p50_ms=0.1, loop_lag_p99_ms=1, loop_lag_max_ms=2, client_cpu_fraction=0.99,
                       waiting_fraction=0.02)
    assert summarize(GOLDEN, client=busy).invalid_reasons == ["client used 97% of a core"]


def test_summary_flattens_to_one_row_with_stat_columns() -> None:
    row = summarize(GOLDEN).flat()
    assert row["ttft_ms_p50"] == pytest.approx(250.0)
    assert {"itl_ms_p99", "tpot_ms_mean", "e2e_ms_p90", "goodput_request_per_s", "mean_in_flight"} <= set(row)


def test_warmup_records_are_left_out() -> None:
    warm = record(0.0, [5.0, 6.0], is_warmup=True)
    assert summarize([*GOLDEN, warm]).requests.num_requests == 3


def test_a_single_chunk_answer_has_a_ttft_and_no_itl() -> None:
    s = summarize([record(0.0, [0.2], [5])])
    assert s.latency.ttft_ms.p50 == pytest.approx(200) and s.latency.itl_ms.p50 is None
    assert s.latency.tpot_ms.p50 == pytest.approx(0.0)


def test_a_level_where_every_request_failed_still_summarizes() -> None:
    failed = [record(0.0, [], ok=False, error_kind="no_tokens", user=u) for u in range(3)]
    s = summarize(failed)
    assert (s.requests.num_ok, s.requests.failure_rate) == (0, 1.0)
    assert (s.throughput.output_tokens_per_s, s.throughput.slo_attainment) == (0.0, 0.0)
    assert s.latency.ttft_ms.p50 is None
