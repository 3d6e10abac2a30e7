"""The load generator against a real server whose timing is scripted: measured = programmed."""

from __future__ import annotations

import pytest

from loadgen.arrivals import Level
from loadgen.runner import LevelBounds
from tests.e2e.levels import run_one_level
from tests.servers import ScriptedServer

pytestmark = pytest.mark.serial  # timings are asserted: run alone, not beside other tests

TTFT_MS, ITL_MS, TOKENS = 100.0, 20.0, 24


@pytest.mark.parametrize("concurrency", [1, 8, 50])
def test_measured_latencies_match_the_programmed_ones(scripted: ScriptedServer, tmp_path, concurrency: int) -> None:
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", concurrency),
                                  LevelBounds(duration_s=1.5), output_tokens=TOKENS)
    assert s.requests.num_failed == 0 and s.requests.num_ok >= concurrency
    assert s.latency.ttft_ms.p50 == pytest.approx(TTFT_MS, abs=5.0)
    assert s.latency.itl_ms.p50 == pytest.approx(ITL_MS, rel=0.03)
    assert s.latency.tpot_ms.p50 == pytest.approx(ITL_MS, rel=0.03)
    assert s.latency.e2e_ms.p50 == pytest.approx(TTFT_MS + (TOKENS - 1) * ITL_MS, abs=10.0)
    assert s.tokens.mean_output_tokens == TOKENS
    assert s.throughput.mean_in_flight == pytest.approx(concurrency, rel=0.05)
    assert {r.token_count_source for r in records if not r.is_warmup} == {"server_usage_deltas"}


def test_warmup_requests_are_recorded_apart_and_open_every_connection_first(scripted, tmp_path) -> None:
    s, records, run = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 4), LevelBounds(max_requests=8))
    warm = [r for r in records if r.is_warmup]
    assert len(warm) == 4 and run.num_warmup == 4 and run.num_records == 8
    assert s.requests.num_requests == 8
    assert all(r.max_tokens == 8 for r in warm)


def test_four_tokens_per_chunk_give_itl_of_a_quarter_gap_and_icl_of_the_gap(scripted, tmp_path) -> None:
    scripted.set_script(tokens_per_chunk=4, itl_ms=40)
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 2), LevelBounds(max_requests=4))
    assert s.latency.itl_ms.p50 == pytest.approx(10.0, rel=0.03)
    assert s.latency.icl_ms.p50 == pytest.approx(40.0, rel=0.03)
    assert s.latency.tpot_ms.p50 == pytest.approx(40.0 * 5 / 23, rel=0.03)  # 6 chunks, 5 gaps, 24 tokens
    assert all(r.chunk_tokens == [4] * 6 for r in records if not r.is_warmup)


def test_without_per_chunk_usage_the_final_count_is_spread_over_the_chunks(scripted, tmp_path) -> None:
    scripted.set_script(tokens_per_chunk=4, itl_ms=40)
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 2), LevelBounds(max_requests=2),
                                  strict_openai=True)
    assert {r.token_count_source for r in records} == {"server_usage"}
    assert s.latency.itl_ms.p50 == pytest.approx(10.0, rel=0.03)
    assert s.requests.num_usage_mismatch == s.requests.num_ok  # 6 chunks, 24 tokens: the summary says they differ


def test_level_bounded_by_requests_sends_exactly_that_many(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=5, itl_ms=1)
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 3), LevelBounds(max_requests=10))
    assert s.requests.num_requests == 10 and len({r.request_id for r in records if not r.is_warmup}) == 10


def test_open_loop_sends_on_schedule_at_the_asked_rate(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=2)
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("rate", 40.0), LevelBounds(duration_s=2.0))
    measured = [r for r in records if not r.is_warmup]
    assert len(measured) == pytest.approx(80, rel=0.35)
    assert s.latency.schedule_lag_ms.p99 < 10
    assert s.kind == "rate"


def test_a_scripted_load_slows_every_gap_by_the_streams_in_flight(scripted: ScriptedServer, tmp_path) -> None:
    """gap = itl + itl_per_stream * (streams - 1): 8 users at 10 ms + 0.5 ms per other stream read 13.5 ms."""
    scripted.set_script(ttft_ms=20, itl_ms=10, itl_per_stream_ms=0.5)
    s, _, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 8), LevelBounds(duration_s=2.0),
                            output_tokens=TOKENS)
    assert s.requests.num_failed == 0
    assert s.latency.tpot_ms.p50 == pytest.approx(10 + 0.5 * 7, rel=0.05)
    assert s.latency.ttft_ms.p50 == pytest.approx(20, abs=3)


def test_past_its_stream_cap_a_request_waits_and_its_ttft_holds_the_wait(scripted: ScriptedServer, tmp_path) -> None:
    """4 slots, 8 users: half the users always wait for a whole request (20 + 23 * 5 ms) before their own."""
    scripted.set_script(ttft_ms=20, itl_ms=5, max_streams=4)
    s, _, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 8), LevelBounds(duration_s=2.0),
                            output_tokens=TOKENS)
    one_request_ms = 20 + (TOKENS - 1) * 5
    assert s.requests.num_failed == 0
    assert s.latency.tpot_ms.p50 == pytest.approx(5, rel=0.05)
    assert s.latency.ttft_ms.p50 == pytest.approx(one_request_ms + 20, rel=0.1)
    assert s.throughput.output_tokens_per_s == pytest.approx(4 * TOKENS / (one_request_ms / 1000), rel=0.1)
