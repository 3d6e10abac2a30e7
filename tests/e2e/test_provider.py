"""A provider as it bills: reasoning streamed before the answer, a rate limit that answers 429, cached
prompt tokens. The scripted server plays each; the figures must match what it was told to do."""

from __future__ import annotations

import time

import pytest

from loadgen.arrivals import Level
from loadgen.runner import LevelBounds
from loadgen.types import SLO
from loadgen.workload import SharedPrefix, Workload, parse_length_spec
from tests.e2e.levels import run_one_level
from tests.servers import ScriptedServer

pytestmark = pytest.mark.serial  # timings are asserted: run alone, not beside other tests

REASONING_TOKENS = 32


@pytest.mark.parametrize("users", [1, 8, 50])
def test_ttft_counts_reasoning_and_ttfvt_waits_for_the_first_visible_token(scripted: ScriptedServer, tmp_path,
                                                                          users: int) -> None:
    """TTFT 100 ms, 20 ms a token, 32 reasoning tokens first: the first visible token comes at
    100 + 32 x 20 = 740 ms, and all 64 tokens are output (reasoning bills as output)."""
    scripted.set_script(ttft_ms=100, itl_ms=20, reasoning_tokens=REASONING_TOKENS)
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", users),
                                  LevelBounds(max_requests=users, num_warmup=0), output_tokens=64)
    assert s.requests.num_ok == users
    # TTFT is the first reasoning token's time, TTFVT the first answer token's: 640 ms apart. 5 ms, as
    # test_timing.py allows its TTFT: 50 streams on two shared cores once read 102.8 against 100.
    assert s.latency.ttft_ms.p50 == pytest.approx(100, abs=5)
    assert s.latency.ttfvt_ms.p50 == pytest.approx(740, abs=5)
    assert s.tokens.mean_output_tokens == 64
    assert {r.reasoning_tokens for r in records} == {REASONING_TOKENS}
    assert s.tokens.usage.reasoning_tokens == REASONING_TOKENS * users
    assert s.tokens.usage.reasoning_share == pytest.approx(0.5)
    assert s.latency.itl_ms.p50 == pytest.approx(20, abs=1)  # reasoning tokens are generated tokens: in the ITL


def test_reasoning_is_counted_from_the_chunks_when_usage_does_not_say(scripted: ScriptedServer, tmp_path) -> None:
    scripted.set_script(ttft_ms=5, itl_ms=1, reasoning_tokens=10)
    _, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 1),
                                  LevelBounds(max_requests=1, num_warmup=0), output_tokens=16,
                                  strict_openai=True)  # the usage then comes only at the end
    assert records[0].reasoning_tokens == 10 and records[0].output_tokens == 16


def test_an_slo_on_ttfvt_judges_the_first_visible_token(scripted: ScriptedServer, tmp_path) -> None:
    scripted.set_script(ttft_ms=20, itl_ms=5, reasoning_tokens=20)  # visible at 20 + 100 = 120 ms
    strict, _, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 2),
                                 LevelBounds(max_requests=4, num_warmup=0), output_tokens=24,
                                 slo=SLO(ttft_ms=60, ttfvt_ms=100))
    loose, _, _ = run_one_level(scripted.base_url, tmp_path / "loose", Level("concurrency", 2),
                                LevelBounds(max_requests=4, num_warmup=0), output_tokens=24,
                                slo=SLO(ttft_ms=60, ttfvt_ms=200))
    assert strict.throughput.slo_attainment == 0 and loose.throughput.slo_attainment == 1


def test_a_rate_limit_is_throttling_not_server_errors_and_the_accepted_rate_is_the_limit(
    scripted: ScriptedServer, tmp_path
) -> None:
    """A bucket of 10 requests/s: at half of it nothing is throttled; at twice it about half is, and what
    the server accepts is about 10 requests/s."""
    scripted.set_script(ttft_ms=5, itl_ms=1, rate_limit_per_s=10, rate_limit_burst=2)
    below, _, _ = run_one_level(scripted.base_url, tmp_path / "r5", Level("rate", 5, burstiness=50),
                                LevelBounds(duration_s=3, num_warmup=0), output_tokens=4)
    above, records, _ = run_one_level(scripted.base_url, tmp_path / "r20", Level("rate", 20, burstiness=50),
                                      LevelBounds(duration_s=3, num_warmup=0), output_tokens=4)
    assert below.requests.num_throttled == 0 and below.requests.failures_by_kind == {}
    assert set(above.requests.failures_by_kind) == {"throttled"}
    assert above.requests.throttle_rate == pytest.approx(0.5, abs=0.12)
    accepted_per_s = above.requests.num_ok / (max(r.send_s for r in records) - min(r.send_s for r in records))
    assert accepted_per_s == pytest.approx(10, rel=0.2)
    assert all(r.http_status == 429 for r in records if not r.ok)


def test_retry_waits_as_retry_after_asks_and_the_wait_counts_against_the_slo(scripted: ScriptedServer,
                                                                             tmp_path) -> None:
    """Every second request is answered 429 with Retry-After: 2; retried, it succeeds 2 s later, its
    attempts recorded and its TTFT judged from the first try."""
    scripted.set_script(ttft_ms=10, itl_ms=2, fault="http_429", fault_every=2)
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 1),
                                  LevelBounds(max_requests=2, num_warmup=0), output_tokens=4,
                                  on_throttle="retry", slo=SLO(ttft_ms=1000))
    first, second = sorted(records, key=lambda r: r.request_id)
    assert first.ok and first.throttled_attempts == 0 and first.attempts == 1
    assert second.ok and second.throttled_attempts == 1 and second.attempts == 2
    assert 2.0 <= second.retry_wait_s < 2.2
    assert s.requests.num_throttled == 1 and s.requests.throttle_rate == 0.5 and s.requests.num_failed == 0
    assert s.latency.retry_wait_ms.p50 == pytest.approx(2000, abs=200)
    assert s.throughput.slo_attainment == 0.5  # 2 s of waiting breaks a 1 s TTFT target


def test_retry_never_waits_past_the_request_timeout(scripted: ScriptedServer, tmp_path) -> None:
    scripted.set_script(fault="http_429")  # Retry-After: 2, always
    started = time.perf_counter()
    _, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 1),
                                  LevelBounds(max_requests=1, num_warmup=0), on_throttle="retry",
                                  request_timeout_s=1.0)
    assert time.perf_counter() - started < 1.0
    assert records[0].error_kind == "throttled" and records[0].attempts == 1
    assert "request timeout" in (records[0].error_message or "")


def test_cached_prompt_tokens_are_summed_as_the_bill_needs_them(scripted: ScriptedServer, tmp_path) -> None:
    """One shared system prompt of 64 words before each question: after the first request, its four
    16-word blocks are served from the server's prefix cache."""
    scripted.set_script(ttft_ms=5, itl_ms=1, prefix_cache_block_words=16)
    workload = Workload(input_tokens=parse_length_spec("80"), output_tokens=parse_length_spec("4"),
                        shared_prefix=SharedPrefix(groups=1, tokens=64))
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 1),
                                  LevelBounds(max_requests=5, num_warmup=0), workload=workload)
    cached = [r.cached_tokens or 0 for r in sorted(records, key=lambda r: r.request_id)]
    assert cached[0] == 0 and all(c >= 48 for c in cached[1:])
    assert s.tokens.usage.cached_prompt_tokens == sum(cached)
    assert s.tokens.usage.cache_hit_rate == pytest.approx(sum(cached) / s.tokens.usage.prompt_tokens)


def test_new_connections_record_their_connect_time(scripted: ScriptedServer, tmp_path) -> None:
    scripted.set_script(ttft_ms=5, itl_ms=1)
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 2),
                                  LevelBounds(max_requests=6, num_warmup=0), output_tokens=4)
    fresh = [r for r in records if r.connect_ms is not None]
    assert len(fresh) == 2  # one per user; the rest reuse a kept-alive connection
    assert all(0 < r.connect_ms < 100 for r in fresh)
    assert s.latency.connect_ms.p50 is not None


def test_the_tcp_connect_time_is_probed_apart_from_the_server(scripted: ScriptedServer, tmp_path) -> None:
    scripted.set_script(ttft_ms=5, itl_ms=1)
    s, _, level_run = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 1),
                                    LevelBounds(max_requests=1, num_warmup=0), output_tokens=4)
    assert level_run.network is not None and 0 < level_run.network.tcp_ms < 50
    assert s.client.tcp_connect_ms == level_run.network.tcp_ms and s.client.tls_handshake_ms is None  # plain http


def test_an_unreachable_endpoint_has_no_probe() -> None:
    import asyncio

    from loadgen.network import probe_connect

    assert asyncio.run(probe_connect("http://127.0.0.1:9/v1", timeout_s=1)) is None


def test_an_https_endpoint_gets_its_tls_handshake_measured_apart(tmp_path) -> None:
    """A real TLS server (a self-signed certificate made with openssl) on 127.0.0.1."""
    import asyncio
    import shutil
    import ssl
    import subprocess

    from loadgen.network import probe_connect

    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test's certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)

    async def measure() -> object:
        served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        served.load_cert_chain(cert, key)

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=served)
        port = server.sockets[0].getsockname()[1]
        client = ssl.create_default_context(cafile=str(cert))
        async with server:
            return await probe_connect(f"https://localhost:{port}/v1", context=client)

    probe = asyncio.run(measure())
    assert probe is not None and probe.tls_ms is not None  # type: ignore[attr-defined]
    assert 0 < probe.tls_ms < 500 and 0 < probe.tcp_ms < 50  # type: ignore[attr-defined]


def test_a_report_against_a_provider_shows_reasoning_throttling_cache_hits_and_the_bill(scripted: ScriptedServer,
                                                                                      tmp_path) -> None:
    """A provider-style endpoint: 8 reasoning tokens before each answer, a limit of 10 requests/s (a bucket
    of 10), a prefix cache. A `--rate 5,10,20` sweep retries what it throttles (an endpoint's default)."""
    import json

    from tests.bench.test_cli import bench, sweep_args

    scripted.set_script(ttft_ms=20, itl_ms=2, reasoning_tokens=8, rate_limit_per_s=10, rate_limit_burst=10,
                        prefix_cache_block_words=16)
    result = bench(*sweep_args(scripted, tmp_path, "--rate", "5,10,20", "--duration", "3",
                               "--shared-prefix", "1:64", "--input-tokens", "96", "--output-tokens", "16"),
                   timeout=180)
    assert result.returncode == 0, result.stderr
    run_dir = next(p for p in tmp_path.iterdir() if not p.name.startswith('.'))
    assert json.loads((run_dir / "run.json").read_text())["client"]["on_throttle"] == "retry"
    report = json.loads((run_dir / "report.json").read_text())
    provider = report["engines"][0]["provider"]
    levels = {lv["label"]: lv for lv in provider["levels"]}
    assert levels["r5"]["throttle_rate"] < 0.05 and levels["r20"]["throttle_rate"] > 0.2
    assert levels["r20"]["reasoning_share"] == pytest.approx(0.5)
    assert levels["r20"]["ttfvt_ms"]["p50"] == pytest.approx(20 + 8 * 2, abs=3)
    assert levels["r20"]["cache_hit_rate"] > 0.3
    assert "20 requests/s" in provider["throttling"] and "accepted at most" in provider["throttling"]
    bills = {b["level"]: b for b in provider["bills"]}
    assert set(bills) == {"r5", "r10", "r20"} and all(b["billed_usd"] > 0 for b in bills.values())
    assert any("cache" in line and "measured" in line for line in report["assumptions"])
    assert "Rate limit:" in (run_dir / "report.md").read_text()
