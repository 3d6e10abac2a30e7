"""The provider's side of a run, as a report states it: reasoning, throttling, network, cache hits, the bill.

Each engine gets a `provider` block only when there is something to say: a reasoning model's share and
its time to the first visible word, the levels the endpoint throttled (and the limit they show), the
network's share of TTFT, and each level's bill reconciled with the server's usage.
"""

from __future__ import annotations

from typing import Any

from costmodel.types import LevelBill
from loadgen.types import LevelSummary

UNITS = {"rate": "requests/s", "concurrency": "users", "trace": "x trace speed"}


def provider_block(summaries: tuple[LevelSummary, ...], bills: tuple[LevelBill, ...]) -> dict[str, Any] | None:
    levels = [_level_row(s) for s in summaries]
    has_reasoning = any(s.tokens.usage.reasoning_tokens for s in summaries)
    has_throttling = any(s.requests.num_throttled for s in summaries)
    has_cache = any(s.tokens.usage.num_with_cached_count for s in summaries)
    is_remote = any(s.client.tls_handshake_ms is not None for s in summaries)
    if not (has_reasoning or has_throttling or has_cache or is_remote or bills):
        return None
    return {"levels": levels, "has_reasoning": has_reasoning, "has_throttling": has_throttling,
            "has_cache": has_cache, "throttling": throttle_statement(summaries),
            "bills": [_bill_row(b) for b in bills], "bill_provider": bills[0].provider_id if bills else None}


def throttle_statement(summaries: tuple[LevelSummary, ...] | list[LevelSummary]) -> str | None:
    """`above 5 requests/s the endpoint throttled (HTTP 429) 8% of requests at 10 requests/s and 48% at
    20 requests/s; it accepted at most 10.2 requests/s`; None when nothing was throttled."""
    ordered = sorted(summaries, key=lambda s: (s.kind, s.target))
    throttled = [s for s in ordered if s.requests.num_throttled]
    if not throttled:
        return None
    kind = throttled[0].kind
    unit = UNITS.get(kind, "")
    same_kind = [s for s in ordered if s.kind == kind]
    clean = [s for s in same_kind if not s.requests.num_throttled and s.target < throttled[0].target]
    where = (f"above {clean[-1].target:g} {unit}" if clean
             else f"at every level measured (from {same_kind[0].target:g} {unit})")
    rates = [f"{s.requests.throttle_rate:.0%} at {s.target:g} {unit}" for s in throttled if s.kind == kind]
    rates[0] = rates[0].replace(" at ", " of requests at ", 1)
    accepted = max(s.throughput.request_per_s for s in same_kind)
    return (f"{where} the endpoint throttled (HTTP 429) {_and(rates)}; it accepted at most {accepted:.1f} "
            "requests/s. A peak it won't take is a reason to buy a higher tier or to self-host.")


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _level_row(s: LevelSummary) -> dict[str, Any]:
    u, latency = s.tokens.usage, s.latency
    return {"label": s.level, "ttft_ms": latency.ttft_ms, "ttfvt_ms": latency.ttfvt_ms,
            "reasoning_share": u.reasoning_share,
            "mean_reasoning_tokens": u.reasoning_tokens / u.num_requests if u.reasoning_tokens and u.num_requests
            else None,
            "throttle_rate": s.requests.throttle_rate, "num_throttled": s.requests.num_throttled,
            "retry_wait_ms": latency.retry_wait_ms, "accepted_request_per_s": s.throughput.request_per_s,
            "cache_hit_rate": u.cache_hit_rate, "connect_ms": latency.connect_ms,
            "tcp_connect_ms": s.client.tcp_connect_ms, "tls_handshake_ms": s.client.tls_handshake_ms}


def _bill_row(b: LevelBill) -> dict[str, Any]:
    u = b.usage
    return {"level": b.level, "num_requests": u.num_requests, "prompt_tokens": u.prompt_tokens,
            "cached_prompt_tokens": u.cached_prompt_tokens, "completion_tokens": u.completion_tokens,
            "reasoning_tokens": u.reasoning_tokens, "asked_output_tokens": u.asked_output_tokens,
            "counted_output_tokens": u.counted_output_tokens, "expected_usd": b.expected_usd,
            "billed_usd": b.billed_usd, "mismatches": list(b.mismatches)}
