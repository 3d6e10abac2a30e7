"""Every fault a server can produce is a failure of the right kind, never counted as throughput."""

from __future__ import annotations

import pytest

from loadgen.arrivals import Level
from loadgen.runner import LevelBounds
from tests.e2e.levels import run_one_level
from tests.servers import ScriptedServer

pytestmark = pytest.mark.serial  # timings are asserted: run alone, not beside other tests


@pytest.mark.parametrize(("fault", "kind", "status"), [
    ("http_500", "http_error", 500),
    ("http_429", "throttled", 429),
    ("error_event", "stream_error", 200),
    ("rate_limit_event", "throttled", 200),
    ("cut", "stream_cut", 200),
])
def test_fault_is_counted_as_a_failure_of_its_kind(
    scripted: ScriptedServer, tmp_path, fault: str, kind: str, status: int
) -> None:
    scripted.set_script(ttft_ms=20, itl_ms=5, fault=fault, fault_every=2)
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 2),
                                  LevelBounds(max_requests=10, num_warmup=0), output_tokens=10)
    failed = [r for r in records if not r.ok]
    assert s.requests.num_failed == 5 and s.requests.num_ok == 5
    assert s.requests.failures_by_kind == {kind: 5}
    assert {r.http_status for r in failed} == {status}
    assert all(r.error_message for r in failed)
    # throughput counts the good requests' tokens only: 5 requests x 10 tokens over the whole run
    assert s.throughput.run_output_tokens_per_s * (max(r.end_s for r in records) - min(r.send_s for r in records)) == \
        pytest.approx(50, rel=0.01)


def test_rate_limit_message_carries_retry_after(scripted, tmp_path) -> None:
    scripted.set_script(fault="http_429")
    _, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 1),
                                  LevelBounds(max_requests=1, num_warmup=0))
    assert "retry after 2 s" in (records[0].error_message or "")


def test_a_stall_past_the_request_timeout_is_a_timeout(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=5, fault="stall", stall_ms=2000, fault_after_chunks=2)
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 1),
                                  LevelBounds(max_requests=1, num_warmup=0), request_timeout_s=0.5)
    assert s.requests.failures_by_kind == {"timeout": 1}
    assert len(records[0].chunk_times_s) == 2  # the tokens before the stall were still recorded


def test_unknown_model_is_an_http_error_with_the_servers_message(scripted, tmp_path) -> None:
    _, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 1),
                                  LevelBounds(max_requests=1, num_warmup=0), model="nope")
    assert records[0].error_kind == "http_error" and "does not exist" in (records[0].error_message or "")


def test_connection_refused_is_a_connection_error(tmp_path) -> None:
    s, records, _ = run_one_level("http://127.0.0.1:9/v1", tmp_path, Level("concurrency", 1),
                                  LevelBounds(max_requests=2, num_warmup=0))
    assert s.requests.failures_by_kind == {"connection_error": 2}


def test_open_loop_latency_from_schedule_carries_a_stall_that_send_time_hides(scripted, tmp_path) -> None:
    """With one request allowed in flight, a stalled server makes the next ones wait in the client:
    measured from their send time they look fast, measured from the schedule they are not."""
    scripted.set_script(ttft_ms=10, itl_ms=5, fault="stall", stall_ms=300, fault_after_chunks=0)
    s, _, _ = run_one_level(scripted.base_url, tmp_path, Level("rate", 20.0, max_concurrency=1),
                            LevelBounds(max_requests=6, num_warmup=0), output_tokens=4)
    assert s.latency.ttft_ms.p50 == pytest.approx(310, abs=20)
    assert s.latency.ttft_from_schedule_ms.p99 > s.latency.ttft_ms.p99 + 500
    assert s.latency.schedule_lag_ms.p99 > 500


def test_a_kept_alive_connection_closed_by_the_server_is_retried_once_on_a_new_one(scripted, tmp_path) -> None:
    """Servers close idle kept-alive connections; a request that meets one was never answered, so it is
    sent again on a fresh connection (as HTTP clients do) instead of counting as the server's failure."""
    scripted.set_script(ttft_ms=5, itl_ms=1, fault="drop_reused")
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 2), LevelBounds(max_requests=6),
                                  output_tokens=4)
    measured = [r for r in records if not r.is_warmup]
    assert s.requests.num_failed == 0 and s.requests.num_resent == sum(1 for r in measured if r.attempts > 1)
    # Nearly every request meets a used connection and goes again, on a new one; one that happens to find the
    # pool empty opens a fresh connection and is answered first time.
    assert s.requests.num_resent >= len(measured) - 2 and all(r.attempts <= 2 for r in measured)


def test_a_request_dropped_on_a_fresh_connection_fails_without_retry(scripted, tmp_path) -> None:
    scripted.set_script(fault="drop")
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 1),
                                  LevelBounds(max_requests=2, num_warmup=0))
    assert s.requests.failures_by_kind == {"connection_error": 2}
    assert [r.attempts for r in records] == [1, 1]
