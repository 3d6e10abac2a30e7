"""Records -> `LevelSummary`: the one place where every metric is defined.

- ttft_ms: send -> first chunk carrying generated content (a reasoning model's reasoning counts: it is
  generated, and billed as output). ttfvt_ms: send -> first chunk of visible content.
- itl_ms: the gap before each generated token after the first, pooled over requests; a chunk carrying
  k tokens spreads its gap over those k tokens (extra tokens in the first chunk add no gap), so per
  request sum(itl) == e2e - ttft. icl_ms keeps the raw gaps between chunks.
- tpot_ms: per request, (e2e - ttft) / (output tokens - 1).
- e2e_ms: send -> last generated content.
- Every latency starts when the request's body was handed to the socket; send_delay_ms is how long the
  client itself took to get it there. Open loop: ttft and e2e also from the scheduled send time, and the
  schedule lag (sent - scheduled), so a slow client can't hide a slow server.
- Throughput over the steady window (closed loop: from the moment every user is active to the moment
  the first user stops; open loop and traces: from the first to the last scheduled arrival): output tokens that
  arrived in the window, requests that ended in it. Whole-run figures stand beside it.
- Goodput: ok requests per second in the window that meet every SLO; attainment: the share of all
  measured requests that do (a failure never meets an SLO). A request retried after being throttled is
  judged from its first try: the wait is the user's.
- Throttling (429s, rate-limit error events) is counted apart from failures of the server: the share of
  requests throttled at least once, and the waits of those retried.
- Usage: the tokens the server reported (prompt, cached prompt, completion, reasoning) beside those the
  client asked for and counted, summed over ok requests: what a provider would bill.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from loadgen.arrivals import parse_label
from loadgen.network import ConnectProbe
from loadgen.types import SLO, ClientCheck, Distribution, LevelSummary, RequestRecord, UsageTotals

MAX_LOOP_LAG_P99_MS = 20.0
MAX_CLIENT_CPU_FRACTION = 0.95
MIN_HELD_CONCURRENCY_FRACTION = 0.9


def summarize(
    records: list[RequestRecord], slo: SLO | None = None, client: ClientCheck | None = None,
    network: ConnectProbe | None = None,
) -> LevelSummary:
    """Summarize the measured (non-warm-up) records of one level of one engine."""
    measured = [r for r in records if not r.is_warmup]
    if not measured:
        raise ValueError("no measured requests to summarize")
    ok = [r for r in measured if r.ok]
    first = measured[0]
    label = parse_label(first.level)
    open_loop = any(r.scheduled_s is not None for r in measured)
    kind = "trace" if label.kind == "trace" else "rate" if open_loop else "concurrency"
    start, end, is_steady = _steady_window(measured, kind)
    window_s = max(end - start, 1e-9)
    meets = [r for r in ok if _meets_slo(r, slo)]
    counts = _count_in_window(ok, start, end)
    run_start = min(r.send_s for r in measured)
    run_s = max(max(r.end_s or r.send_s for r in measured) - run_start, 1e-9)
    summary = LevelSummary(
        engine=first.engine, level=first.level, kind=kind, target=label.target, base_level=label.base,
        repeat=label.repeat,
        num_requests=len(measured), num_ok=len(ok), num_failed=len(measured) - len(ok),
        failure_rate=(len(measured) - len(ok)) / len(measured),
        failures_by_kind=dict(Counter(r.error_kind or "unknown" for r in measured if not r.ok)),
        window_s=window_s, is_steady_window=is_steady,
        request_per_s=counts.requests / window_s,
        output_tokens_per_s=counts.output_tokens / window_s,
        total_tokens_per_s=(counts.output_tokens + counts.input_tokens) / window_s,
        run_request_per_s=len(ok) / run_s,
        run_output_tokens_per_s=sum(r.output_tokens for r in ok) / run_s,
        goodput_request_per_s=_count_in_window(meets, start, end).requests / window_s,
        slo_attainment=len(meets) / len(measured),
        mean_input_tokens=_mean([r.prompt_tokens for r in ok if r.prompt_tokens is not None]),
        mean_output_tokens=_mean([r.output_tokens for r in ok]),
        mean_in_flight=_mean_in_flight(measured, start, end),
        **_latency_distributions(ok),
        **_turn_distributions(ok),
        mean_cached_tokens=_mean_or_none([r.cached_tokens for r in ok if r.cached_tokens is not None]),
        token_count_sources=dict(Counter(r.token_count_source for r in ok)),
        num_usage_mismatch=sum(
            1 for r in ok if r.server_output_tokens is not None and r.server_output_tokens != len(r.chunk_times_s)
        ),
        num_short_outputs=sum(1 for r in ok if r.max_tokens is not None and r.output_tokens < r.max_tokens),
        num_resent=sum(1 for r in measured if r.attempts > 1 + r.num_throttle_retries),
        num_throttled=sum(1 for r in measured if r.throttled_attempts),
        throttle_rate=sum(1 for r in measured if r.throttled_attempts) / len(measured),
        num_throttled_attempts=sum(r.throttled_attempts for r in measured),
        retry_wait_ms=Distribution.of([r.retry_wait_s * 1000 for r in ok if r.first_send_s is not None]),
        connect_ms=Distribution.of([r.connect_ms for r in measured if r.connect_ms is not None]),
        usage=usage_totals(ok),
        tcp_connect_ms=network.tcp_ms if network else None,
        tls_handshake_ms=network.tls_ms if network else None,
        client=client,
    )
    reasons = _invalid_reasons(summary)
    return replace(summary, is_valid=not reasons, invalid_reasons=reasons)


def usage_totals(ok: list[RequestRecord]) -> UsageTotals:
    reported = [r for r in ok if r.prompt_tokens is not None or r.server_output_tokens is not None]
    reasoning = [r.reasoning_tokens for r in ok if r.reasoning_tokens is not None]
    return UsageTotals(
        num_requests=len(ok), num_with_usage=len(reported),
        asked_output_tokens=sum(r.max_tokens or 0 for r in ok),
        counted_output_tokens=sum(r.output_tokens for r in ok),
        prompt_tokens=sum(r.prompt_tokens or 0 for r in reported),
        cached_prompt_tokens=sum(r.cached_tokens or 0 for r in reported),
        completion_tokens=sum(r.server_output_tokens or 0 for r in reported),
        reasoning_tokens=sum(reasoning) if reasoning else None,
        num_with_cached_count=sum(1 for r in reported if r.cached_tokens is not None),
    )


def _latency_distributions(ok: list[RequestRecord]) -> dict[str, Distribution]:
    ttft, e2e, tpot, itl, icl, ttfvt = [], [], [], [], [], []
    scheduled_ttft, scheduled_e2e, lag, send_delay = [], [], [], []
    for r in ok:
        if r.dispatch_s is not None:
            send_delay.append(r.send_s - r.dispatch_s)
        times = np.asarray(r.chunk_times_s)
        ttft.append(times[0])
        if r.first_visible_s is not None:
            ttfvt.append(r.first_visible_s)
        e2e.append(times[-1])
        if r.output_tokens > 1:
            tpot.append((times[-1] - times[0]) / (r.output_tokens - 1))
        gaps = np.diff(times)
        icl.append(gaps)
        tokens = np.asarray(r.chunk_tokens[1:], dtype=np.int64)
        itl.append(np.repeat(gaps / np.maximum(tokens, 1), tokens))
        if r.scheduled_s is not None:
            delay = r.send_s - r.scheduled_s
            lag.append(delay)
            scheduled_ttft.append(delay + times[0])
            scheduled_e2e.append(delay + times[-1])
    ms = 1000.0
    return {
        "ttft_ms": Distribution.of(np.asarray(ttft) * ms),
        "ttfvt_ms": Distribution.of(np.asarray(ttfvt) * ms),
        "itl_ms": Distribution.of(np.concatenate(itl) * ms if itl else []),
        "icl_ms": Distribution.of(np.concatenate(icl) * ms if icl else []),
        "tpot_ms": Distribution.of(np.asarray(tpot) * ms),
        "e2e_ms": Distribution.of(np.asarray(e2e) * ms),
        "ttft_from_schedule_ms": Distribution.of(np.asarray(scheduled_ttft) * ms),
        "e2e_from_schedule_ms": Distribution.of(np.asarray(scheduled_e2e) * ms),
        "schedule_lag_ms": Distribution.of(np.asarray(lag) * ms),
        "send_delay_ms": Distribution.of(np.asarray(send_delay) * ms),
    }


def _turn_distributions(ok: list[RequestRecord]) -> dict[str, Distribution]:
    first = [r.chunk_times_s[0] * 1000.0 for r in ok if r.turn == 1]
    later = [r.chunk_times_s[0] * 1000.0 for r in ok if r.turn is not None and r.turn > 1]
    return {"ttft_ms_first_turn": Distribution.of(first), "ttft_ms_later_turns": Distribution.of(later)}


def _mean_or_none(values: list[int]) -> float | None:
    return float(np.mean(values)) if values else None


def _meets_slo(r: RequestRecord, slo: SLO | None) -> bool:
    if slo is None:
        return True
    wait = r.retry_wait_s * 1000
    ttft, e2e = r.chunk_times_s[0] * 1000, r.chunk_times_s[-1] * 1000
    if slo.ttft_ms is not None and wait + ttft > slo.ttft_ms:
        return False
    visible = r.first_visible_s * 1000 if r.first_visible_s is not None else math.inf
    if slo.ttfvt_ms is not None and wait + visible > slo.ttfvt_ms:
        return False
    if slo.e2e_ms is not None and wait + e2e > slo.e2e_ms:
        return False
    if slo.tpot_ms is not None and r.output_tokens > 1:
        return (e2e - ttft) / (r.output_tokens - 1) <= slo.tpot_ms
    return True


def _steady_window(measured: list[RequestRecord], kind: str) -> tuple[float, float, bool]:
    """The window in which the level's full load was applied, or the whole run if there is none."""
    run = (min(r.send_s for r in measured), max(r.end_s or r.send_s for r in measured))
    if kind in ("rate", "trace"):
        scheduled = [r.scheduled_s for r in measured if r.scheduled_s is not None]
        start, end = min(scheduled), max(scheduled)
    else:
        by_user: dict[int | None, list[RequestRecord]] = {}
        for r in measured:
            by_user.setdefault(r.user, []).append(r)
        start = max(min(r.send_s for r in rs) for rs in by_user.values())
        end = min(max(r.end_s or r.send_s for r in rs) for rs in by_user.values())
    if end - start <= 0:
        return run[0], run[1], False
    return start, end, True


@dataclass(frozen=True)
class _WindowCounts:
    requests: int
    output_tokens: int
    input_tokens: int


def _count_in_window(records: list[RequestRecord], start: float, end: float) -> _WindowCounts:
    requests = output_tokens = input_tokens = 0
    for r in records:
        arrivals = r.send_s + np.asarray(r.chunk_times_s)
        inside = (arrivals >= start) & (arrivals <= end)
        output_tokens += int(np.asarray(r.chunk_tokens)[inside].sum())
        if start <= arrivals[-1] <= end:
            requests += 1
            input_tokens += r.prompt_tokens or 0
    return _WindowCounts(requests, output_tokens, input_tokens)


def _mean_in_flight(measured: list[RequestRecord], start: float, end: float) -> float:
    """Time-averaged number of requests in flight over the window: the concurrency actually held."""
    busy = sum(max(0.0, min(r.end_s or end, end) - max(r.send_s, start)) for r in measured)
    return busy / max(end - start, 1e-9)


def _invalid_reasons(s: LevelSummary) -> list[str]:
    reasons = []
    if s.client is not None and s.client.loop_lag_p99_ms > MAX_LOOP_LAG_P99_MS:
        reasons.append(f"client event loop lagged {s.client.loop_lag_p99_ms:.1f} ms at p99")
    busy = s.client.client_cpu_fraction - s.client.waiting_fraction if s.client is not None else 0.0
    if s.client is not None and busy > MAX_CLIENT_CPU_FRACTION:
        reasons.append(f"client used {busy:.0%} of a core")
    if s.kind == "concurrency" and s.is_steady_window and s.mean_in_flight < MIN_HELD_CONCURRENCY_FRACTION * s.target:
        reasons.append(f"client held {s.mean_in_flight:.1f} of {s.target:g} requests in flight")
    return reasons


def _mean(values: list[int] | list[float]) -> float:
    return float(np.mean(values)) if values else math.nan
