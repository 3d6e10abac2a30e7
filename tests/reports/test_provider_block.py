"""The report's sentence on a rate limit, from the levels' throttle rates."""

from __future__ import annotations

from dataclasses import replace

from loadgen.types import Distribution, Latency, LevelSummary, RequestCounts, Throughput, Tokens
from reports.provider import throttle_statement


def level(target: float, throttle_rate: float, accepted: float) -> LevelSummary:
    return LevelSummary(
        engine="provider", level=f"r{target:g}", kind="rate", target=target,
        requests=RequestCounts(num_requests=100, num_ok=100, num_failed=0, failure_rate=0.0, failures_by_kind={},
                               num_throttled=round(throttle_rate * 100), throttle_rate=throttle_rate),
        throughput=Throughput(window_s=10.0, is_steady_window=True, request_per_s=accepted,
                              output_tokens_per_s=accepted * 64, total_tokens_per_s=accepted * 128,
                              run_request_per_s=accepted, run_output_tokens_per_s=accepted * 64,
                              goodput_request_per_s=accepted, slo_attainment=1.0, mean_in_flight=1.0),
        latency=Latency(ttft_ms=Distribution(), itl_ms=Distribution(), icl_ms=Distribution(), tpot_ms=Distribution(),
                        e2e_ms=Distribution()),
        tokens=Tokens(mean_input_tokens=64, mean_output_tokens=64))


def test_the_limit_is_stated_between_the_last_clean_level_and_the_throttled_ones() -> None:
    text = throttle_statement([level(20, 0.48, 10.3), level(5, 0.0, 5.0), level(10, 0.08, 9.6)])
    assert text is not None
    assert text.startswith("above 5 requests/s the endpoint throttled (HTTP 429) 8% of requests at 10 requests/s "
                           "and 48% at 20 requests/s; it accepted at most 10.3 requests/s.")


def test_throttling_from_the_first_level_says_so_and_none_says_nothing() -> None:
    text = throttle_statement([level(10, 0.2, 8.0), level(20, 0.5, 10.0)])
    assert text is not None and text.startswith("at every level measured (from 10 requests/s)")
    assert throttle_statement([replace(level(10, 0.0, 10.0))]) is None
