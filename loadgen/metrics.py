"""Records -> `LevelSummary`: the one place where every metric is defined, computed over a level's columns
(`loadgen.columns`: a few bytes per token, so a long level summarizes in bounded memory).

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
- Quality (a graded dataset): the share of graded answers that were right, with its 95 % Wilson interval;
  a failed request has no answer and is not graded (it counts as a failure).
- Usage: the tokens the server reported (prompt, cached prompt, completion, reasoning) beside those the
  client asked for and counted, summed over ok requests: what a provider would bill.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from loadgen.arrivals import parse_label
from loadgen.columns import NONE, LevelColumns, columns_of
from loadgen.network import ConnectProbe
from loadgen.quality.figures import accuracy, validity
from loadgen.sessions.figures import session_figures
from loadgen.types import (
    SLO,
    AdapterFigures,
    ClientCheck,
    ClientSide,
    Distribution,
    Latency,
    LevelSummary,
    MachineLoad,
    RequestCounts,
    RequestRecord,
    Throughput,
    Tokens,
    UsageTotals,
    WorkerRun,
    worst_check,
)

MAX_LOOP_LAG_P99_MS = 20.0
MAX_CLIENT_CPU_FRACTION = 0.95
MIN_HELD_CONCURRENCY_FRACTION = 0.9
MAX_STARVED_FRACTION = 0.01  # of a worker's measured time, waiting for requests from the driver
MAX_CLOCK_UNCERTAINTY_MS = 1.0
MAX_CONTEXT_OVERFLOW_FRACTION = 0.01  # of an agent level's calls, longer than the model's context
MAX_OUTSIDE_CORES = 0.25  # of a core, used by processes outside the run (or stolen) before a level says so


def summarize(
    records: list[RequestRecord], slo: SLO | None = None, client: ClientCheck | None = None,
    network: ConnectProbe | None = None,
) -> LevelSummary:
    """Summarize the measured (non-warm-up) records of one level of one engine."""
    columns = columns_of(records)
    if columns is None:
        raise ValueError("no measured requests to summarize")
    return summarize_columns(columns, slo, client, network)


def summarize_columns(
    c: LevelColumns, slo: SLO | None = None, client: ClientCheck | None = None, network: ConnectProbe | None = None,
    workers: Sequence[WorkerRun] = (), machine: MachineLoad | None = None,
    ran: tuple[float, float | None] | None = None,
) -> LevelSummary:
    """Summarize one level's measured requests, held as columns (`loadgen.columns`). A level split across
    client processes (`workers`) is judged by each process's own check; what else the machine did meanwhile
    (`machine`) is noted above a share of a core, and a level that ran well past its --duration (`ran`: its
    wall seconds and the duration it was given) says so."""
    if workers:
        client = worst_check([w.client for w in workers])
    n = len(c)
    if n == 0:
        raise ValueError("no measured requests to summarize")
    t, ok = c.times, c.ok
    label = parse_label(c.level)
    open_loop = bool(np.any(~np.isnan(t["scheduled_s"])))
    kind = "trace" if label.kind == "trace" else "rate" if open_loop else "concurrency"
    first, last = first_and_last_chunk(c)
    summary = LevelSummary(
        engine=c.engine, level=c.level, kind=kind, target=label.target, base_level=label.base, repeat=label.repeat,
        requests=_request_counts(c), throughput=_throughput(c, kind, ok & _meets_slo(c, slo, first, last), last),
        latency=_latency(c, first, last), tokens=_tokens(c),
        client=ClientSide(check=client, num_workers=max(len(workers), 1), machine=machine,
                          tcp_connect_ms=network.tcp_ms if network else None,
                          tls_handshake_ms=network.tls_ms if network else None),
    )
    graded = c.counts["correct"] != NONE
    if graded.any():
        summary = replace(summary, quality=accuracy(int((c.counts["correct"] == 1).sum()), int(graded.sum())))
    judged = c.counts["structure_valid"] != NONE
    if judged.any():
        summary = replace(summary, validity=validity(int((c.counts["structure_valid"] == 1).sum()), int(judged.sum()),
                                                     c.structure_faults))
    if c.session is not None or c.adapter is not None:
        ended = np.where(np.isnan(t["end_s"]), t["send_s"], t["end_s"])
        start, end, _ = _steady_window(c, kind, ended)
        if c.session is not None:
            summary = replace(summary, sessions=session_figures(c, first, (start, end)))
        if c.adapter is not None:
            summary = replace(summary, adapters=_adapter_figures(c, first, last, start, end))
    reasons = _invalid_reasons(summary, workers)
    notes = _worker_notes(workers) + machine_notes(machine) + overrun_notes(ran)
    return replace(summary, is_valid=not reasons, invalid_reasons=reasons, notes=notes)


OVERRUN_SHARE = 0.10  # a level that ran past its --duration by more than this share of it says so


def overrun_notes(ran: tuple[float, float | None] | None) -> list[str]:
    """A level whose requests in flight at the end of its --duration took long to finish: its real length."""
    if ran is None or ran[1] is None or ran[0] <= ran[1] * (1 + OVERRUN_SHARE):
        return []
    wall_s, duration_s = ran
    return [f"ran {wall_s:,.0f} s, not {duration_s:g} s: {wall_s - duration_s:,.0f} s finishing the requests in flight "
            "(rates are from its steady window)"]


def _request_counts(c: LevelColumns) -> RequestCounts:
    k, ok = c.counts, c.ok
    n, num_ok = len(c), int(c.ok.sum())
    throttled = k["throttled_attempts"] > 0
    throttle_retries = k["throttled_attempts"] - c.throttled_error
    return RequestCounts(
        num_requests=n, num_ok=num_ok, num_failed=n - num_ok, failure_rate=(n - num_ok) / n,
        failures_by_kind=c.failures_by_kind,
        num_usage_mismatch=int(np.sum(ok & (k["server_output_tokens"] != NONE)
                                      & (k["server_output_tokens"] != c.num_chunks))),
        num_short_outputs=int(np.sum(ok & (k["max_tokens"] != NONE) & (k["output_tokens"] < k["max_tokens"]))),
        num_resent=int(np.sum(k["attempts"] > 1 + throttle_retries)), num_throttled=int(throttled.sum()),
        throttle_rate=int(throttled.sum()) / n, num_throttled_attempts=int(k["throttled_attempts"].sum()),
    )


def _throughput(c: LevelColumns, kind: str, meets: np.ndarray, last: np.ndarray) -> Throughput:
    """Over the steady window, and over the whole run; `meets`: the ok requests that met every SLO."""
    t, ok = c.times, c.ok
    ended = np.where(np.isnan(t["end_s"]), t["send_s"], t["end_s"])
    start, end, is_steady = _steady_window(c, kind, ended)
    window_s = max(end - start, 1e-9)
    counts = _count_in_window(c, ok, start, end, last)
    run_s = max(float(ended.max()) - float(t["send_s"].min()), 1e-9)
    return Throughput(
        window_s=window_s, is_steady_window=is_steady, request_per_s=counts.requests / window_s,
        output_tokens_per_s=counts.output_tokens / window_s,
        total_tokens_per_s=(counts.output_tokens + counts.input_tokens) / window_s,
        run_request_per_s=int(ok.sum()) / run_s,
        run_output_tokens_per_s=int(c.counts["output_tokens"][ok].sum()) / run_s,
        goodput_request_per_s=_count_in_window(c, meets, start, end, last).requests / window_s,
        slo_attainment=int(meets.sum()) / len(c), mean_in_flight=_mean_in_flight(c, start, end),
    )


def _latency(c: LevelColumns, first: np.ndarray, last: np.ndarray) -> Latency:
    t, ok = c.times, c.ok
    retried = ok & ~np.isnan(t["first_send_s"])
    return Latency(
        **_latency_distributions(c, ok, first, last), **_turn_distributions(c, ok, first),
        retry_wait_ms=Distribution.of((t["send_s"][retried] - t["first_send_s"][retried]) * 1000),
        connect_ms=Distribution.of(t["connect_ms"][~np.isnan(t["connect_ms"])]),
    )


def _tokens(c: LevelColumns) -> Tokens:
    k, ok = c.counts, c.ok
    prompt_ok, cached_ok = k["prompt_tokens"][ok], k["cached_tokens"][ok]
    return Tokens(
        mean_input_tokens=_mean(prompt_ok[prompt_ok != NONE]), mean_output_tokens=_mean(k["output_tokens"][ok]),
        mean_cached_tokens=_mean_or_none(cached_ok[cached_ok != NONE]), token_count_sources=c.token_count_sources,
        usage=usage_totals(c, ok), mean_tokens_per_chunk=_tokens_per_chunk(c),
        request_acceptance_rate=_request_acceptance(c),
    )


def _request_acceptance(c: LevelColumns) -> float | None:
    drafted = c.ok & (c.counts["draft_tokens"] > 0) & (c.counts["accepted_draft_tokens"] != NONE)
    total = int(c.counts["draft_tokens"][drafted].sum())
    return int(c.counts["accepted_draft_tokens"][drafted].sum()) / total if total else None


def _tokens_per_chunk(c: LevelColumns) -> float | None:
    """Tokens the server counted over the chunks they came in, pooled over the ok requests it counted for."""
    counted = c.ok & (c.counts["server_output_tokens"] != NONE) & (c.num_chunks > 0)
    chunks = int(c.num_chunks[counted].sum())
    return int(c.counts["server_output_tokens"][counted].sum()) / chunks if chunks else None


def usage_totals(c: LevelColumns, ok: np.ndarray) -> UsageTotals:
    k = c.counts
    reported = ok & ((k["prompt_tokens"] != NONE) | (k["server_output_tokens"] != NONE))
    reasoning = k["reasoning_tokens"][ok & (k["reasoning_tokens"] != NONE)]

    def total(name: str, where: np.ndarray) -> int:  # a count the record does not have adds 0
        values = k[name][where]
        return int(values[values != NONE].sum())

    return UsageTotals(
        num_requests=int(ok.sum()), num_with_usage=int(reported.sum()),
        asked_output_tokens=total("max_tokens", ok), counted_output_tokens=int(k["output_tokens"][ok].sum()),
        prompt_tokens=total("prompt_tokens", reported), cached_prompt_tokens=total("cached_tokens", reported),
        completion_tokens=total("server_output_tokens", reported),
        reasoning_tokens=int(reasoning.sum()) if reasoning.size else None,
        num_with_cached_count=int(np.sum(reported & (k["cached_tokens"] != NONE))),
    )


def first_and_last_chunk(c: LevelColumns) -> tuple[np.ndarray, np.ndarray]:
    """Each request's first and last chunk time (NaN for a request without chunks)."""
    has = c.num_chunks > 0
    first, last = np.full(len(c), np.nan), np.full(len(c), np.nan)
    first[has] = c.chunk_times_s[c.chunk_start[:-1][has]]
    last[has] = c.chunk_times_s[c.chunk_start[1:][has] - 1]
    return first, last


def _latency_distributions(c: LevelColumns, ok: np.ndarray, first: np.ndarray,
                           last: np.ndarray) -> dict[str, Distribution]:
    t, out = c.times, c.counts["output_tokens"]
    ms = 1000.0
    many = ok & (out > 1)
    scheduled = ok & ~np.isnan(t["scheduled_s"])
    delay = t["send_s"] - t["scheduled_s"]
    dispatched = ok & ~np.isnan(t["dispatch_s"])
    visible = ok & ~np.isnan(t["first_visible_s"])
    return {
        "ttft_ms": Distribution.of(first[ok] * ms),
        "ttfvt_ms": Distribution.of(t["first_visible_s"][visible] * ms),
        **_gap_distributions(c, ok),
        "tpot_ms": Distribution.of((last[many] - first[many]) / (out[many] - 1) * ms),
        "e2e_ms": Distribution.of(last[ok] * ms),
        "ttft_from_schedule_ms": Distribution.of((delay[scheduled] + first[scheduled]) * ms),
        "e2e_from_schedule_ms": Distribution.of((delay[scheduled] + last[scheduled]) * ms),
        "schedule_lag_ms": Distribution.of(delay[scheduled] * ms),
        "send_delay_ms": Distribution.of((t["send_s"][dispatched] - t["dispatch_s"][dispatched]) * ms),
    }


def inter_token_gaps_s(c: LevelColumns, ok: np.ndarray) -> np.ndarray:
    """ITL's values, in seconds: every gap before a chunk of an ok request, spread over the chunk's tokens."""
    gaps, tokens = _gaps(c, ok)
    return gaps if tokens is None else np.repeat(gaps / np.maximum(tokens, 1), tokens)


def _gap_distributions(c: LevelColumns, ok: np.ndarray) -> dict[str, Distribution]:
    """ICL: the gaps between the chunks of each ok request; ITL: each gap spread over its chunk's tokens.
    Pooled in record order; the one array of every gap is the largest thing a summary holds."""
    gaps, tokens = _gaps(c, ok)
    ones = tokens is None  # one token a chunk (the usual stream): ITL is ICL, gap for gap
    itl = None if ones else np.repeat(gaps / np.maximum(tokens, 1), tokens)
    gaps *= 1000.0
    icl = Distribution.of(gaps, overwrite=True)
    if itl is None:
        return {"itl_ms": icl, "icl_ms": icl}
    itl *= 1000.0
    return {"itl_ms": Distribution.of(itl, overwrite=True), "icl_ms": icl}


def _gaps(c: LevelColumns, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Every gap before a chunk of an ok request (its first chunk has none), and that chunk's tokens (None
    when every chunk carries one), filled a block of requests at a time."""
    ones = bool(np.all(c.chunk_tokens == 1))
    total = int(np.maximum(c.num_chunks[ok] - 1, 0).sum())
    gaps = np.empty(total)
    tokens = None if ones else np.empty(total, dtype=c.chunk_tokens.dtype)
    filled = 0
    for lo, hi, a, b in _blocks(c):
        counts = c.num_chunks[lo:hi]
        keep = np.repeat(ok[lo:hi], counts)
        keep[c.chunk_start[lo:hi][counts > 0] - a] = False  # a request's first chunk has no gap before it
        block = np.diff(c.chunk_times_s[a:b])[keep[1:]] if b - a > 1 else np.empty(0)
        gaps[filled:filled + len(block)] = block
        if tokens is not None:
            tokens[filled:filled + len(block)] = c.chunk_tokens[a:b][keep]
        filled += len(block)
    return gaps, tokens


def _blocks(c: LevelColumns, size: int = 1 << 16) -> Iterator[tuple[int, int, int, int]]:
    """Requests [lo, hi) and their chunks [a, b), a block at a time: what is computed for each chunk is
    computed in pieces of bounded size."""
    for lo in range(0, len(c), size):
        hi = min(lo + size, len(c))
        yield lo, hi, int(c.chunk_start[lo]), int(c.chunk_start[hi])


def _turn_distributions(c: LevelColumns, ok: np.ndarray, first: np.ndarray) -> dict[str, Distribution]:
    turn = c.counts["turn"]
    return {"ttft_ms_first_turn": Distribution.of(first[ok & (turn == 1)] * 1000.0),
            "ttft_ms_later_turns": Distribution.of(first[ok & (turn > 1)] * 1000.0)}


def _mean_or_none(values: np.ndarray) -> float | None:
    return float(np.mean(values)) if values.size else None


def _meets_slo(c: LevelColumns, slo: SLO | None, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Whether each request met every target of the SLO (a throttled request's wait counts against it)."""
    meets = np.ones(len(c), dtype=bool)
    if slo is None:
        return meets
    t, out = c.times, c.counts["output_tokens"]
    wait = np.where(np.isnan(t["first_send_s"]), 0.0, t["send_s"] - t["first_send_s"]) * 1000
    ttft, e2e = first * 1000, last * 1000
    visible = np.where(np.isnan(t["first_visible_s"]), np.inf, t["first_visible_s"] * 1000)
    if slo.ttft_ms is not None:
        meets &= ~(wait + ttft > slo.ttft_ms)
    if slo.ttfvt_ms is not None:
        meets &= ~(wait + visible > slo.ttfvt_ms)
    if slo.e2e_ms is not None:
        meets &= ~(wait + e2e > slo.e2e_ms)
    if slo.tpot_ms is not None:
        many = out > 1
        tpot = np.where(many, (e2e - ttft) / np.maximum(out - 1, 1), 0.0)
        meets &= ~many | (tpot <= slo.tpot_ms)
    return meets


def _steady_window(c: LevelColumns, kind: str, ended: np.ndarray) -> tuple[float, float, bool]:
    """The window in which the level's full load was applied, or the whole run if there is none."""
    send = c.times["send_s"]
    run = (float(send.min()), float(ended.max()))
    if kind in ("rate", "trace"):
        scheduled = c.times["scheduled_s"][~np.isnan(c.times["scheduled_s"])]
        start, end = float(scheduled.min()), float(scheduled.max())
    else:  # from the moment every user was active to the moment the first one stopped
        users, of_user = np.unique(c.counts["user"], return_inverse=True)
        first_send, last_end = np.full(len(users), np.inf), np.full(len(users), -np.inf)
        np.minimum.at(first_send, of_user, send)
        np.maximum.at(last_end, of_user, ended)
        start, end = float(first_send.max()), float(last_end.min())
    if end - start <= 0:
        return run[0], run[1], False
    return start, end, True


@dataclass(frozen=True)
class _WindowCounts:
    requests: int
    output_tokens: int
    input_tokens: int


def _count_in_window(c: LevelColumns, which: np.ndarray, start: float, end: float,
                     last: np.ndarray) -> _WindowCounts:
    """Of the requests `which` selects: output tokens that arrived in the window, requests that ended in it."""
    tokens = 0
    for lo, hi, a, b in _blocks(c):
        counts = c.num_chunks[lo:hi]
        arrivals = np.repeat(c.times["send_s"][lo:hi], counts) + c.chunk_times_s[a:b]
        inside = np.repeat(which[lo:hi], counts) & (arrivals >= start) & (arrivals <= end)
        tokens += int(c.chunk_tokens[a:b][inside].sum())
    finished = c.times["send_s"] + last
    ended_inside = which & (start <= finished) & (finished <= end)
    prompt = c.counts["prompt_tokens"][ended_inside]
    return _WindowCounts(int(ended_inside.sum()), tokens, int(prompt[prompt != NONE].sum()))


BASE_ROW = "(base)"  # the requests of the base model, in a level where others asked for adapters


def _adapter_figures(c: LevelColumns, first: np.ndarray, last: np.ndarray, start: float,
                     end: float) -> tuple[AdapterFigures, ...]:
    """One row per adapter (most requests first), the base model's requests a row of their own: tokens counted in
    the level's own steady window, so the rows' output tokens a second add up to the level's."""
    assert c.adapter is not None
    window_s = max(end - start, 1e-9)
    ok, out, ms = c.ok, c.counts["output_tokens"], 1000.0
    groups = [(name, c.adapter == index) for index, name in enumerate(c.adapter_names)]
    if bool((c.adapter == NONE).any()):
        groups.append((BASE_ROW, c.adapter == NONE))
    rows = []
    for name, mine in groups:
        good = mine & ok
        many = good & (out > 1)
        rows.append(AdapterFigures(
            adapter=name, num_requests=int(mine.sum()), num_ok=int(good.sum()), share=float(mine.sum()) / len(c),
            output_tokens_per_s=_count_in_window(c, good, start, end, last).output_tokens / window_s,
            ttft_ms=Distribution.of(first[good] * ms), e2e_ms=Distribution.of(last[good] * ms),
            tpot_ms=Distribution.of((last[many] - first[many]) / (out[many] - 1) * ms),
        ))
    return tuple(sorted(rows, key=lambda row: (-row.num_requests, row.adapter)))


def _mean_in_flight(c: LevelColumns, start: float, end: float) -> float:
    """Time-averaged number of requests in flight over the window: the concurrency actually held."""
    ended = np.where(np.isnan(c.times["end_s"]), end, c.times["end_s"])
    busy = np.maximum(0.0, np.minimum(ended, end) - np.maximum(c.times["send_s"], start))
    return sum(busy.tolist()) / max(end - start, 1e-9)  # summed in order, as it always was


def _invalid_reasons(s: LevelSummary, workers: Sequence[WorkerRun] = ()) -> list[str]:
    checks = [(f"client worker {w.worker}", w.client) for w in workers] or \
        ([("client", s.client.check)] if s.client.check is not None else [])
    reasons = []
    for who, check in checks:
        if check.loop_lag_p99_ms > MAX_LOOP_LAG_P99_MS:
            reasons.append(f"{who}'s event loop lagged {check.loop_lag_p99_ms:.1f} ms at p99" if workers
                           else f"client event loop lagged {check.loop_lag_p99_ms:.1f} ms at p99")
        busy = check.client_cpu_fraction - check.waiting_fraction
        if busy > MAX_CLIENT_CPU_FRACTION:
            reasons.append(f"{who} used {busy:.0%} of a core")
    for w in workers:
        if w.wall_s > 0 and w.starved_s > MAX_STARVED_FRACTION * w.wall_s:
            reasons.append(f"client worker {w.worker} waited {w.starved_s:.2f} s for requests from the driver")
    if s.sessions is not None:
        return reasons + _session_reasons(s)
    held = s.throughput.mean_in_flight
    if s.kind == "concurrency" and s.throughput.is_steady_window and held < MIN_HELD_CONCURRENCY_FRACTION * s.target:
        reasons.append(f"client held {held:.1f} of {s.target:g} requests in flight")
    return reasons


def _session_reasons(s: LevelSummary) -> list[str]:
    """Agent sessions: the sessions alive are the load (calls in flight are fewer: tools take time), and a
    level whose calls overflow the model's context measures a different workload."""
    figures = s.sessions
    assert figures is not None
    reasons = []
    held = figures.mean_alive
    if s.kind == "concurrency" and s.throughput.is_steady_window and held < MIN_HELD_CONCURRENCY_FRACTION * s.target:
        reasons.append(f"client held {held:.1f} of {s.target:g} sessions alive")
    overflow = figures.num_context_overflow / max(s.requests.num_requests, 1)
    if overflow > MAX_CONTEXT_OVERFLOW_FRACTION:
        reasons.append(f"{figures.num_context_overflow} of {s.requests.num_requests} calls ({overflow:.1%}) need more "
                       "than the model's context: serve a longer context, or replay shorter sessions")
    return reasons


def _worker_notes(workers: Sequence[WorkerRun]) -> list[str]:
    """Times from several processes share one timeline only as well as their clocks were matched; a worker
    at a low priority reads late wherever it shares its cores."""
    notes = []
    uncertain = [w for w in workers if w.clock_uncertainty_ms > MAX_CLOCK_UNCERTAINTY_MS]
    if uncertain:
        worst = max(uncertain, key=lambda w: w.clock_uncertainty_ms)
        notes.append(f"the clocks of {len(uncertain)} client worker(s) are known only to within "
                     f"{worst.clock_uncertainty_ms:.1f} ms of the driver's (worker {worst.worker} on {worst.host}): "
                     "the steady window and throughput across workers carry that uncertainty; latencies of a "
                     "request do not")
    if niced := [w for w in workers if w.nice > 0]:
        notes.append(f"{len(niced)} client worker(s) ran at nice {max(w.nice for w in niced)} (Ray starts its "
                     "workers so unless the cluster was started with RAY_worker_niceness=0): where they share "
                     "cores with other work they read tokens late")
    return notes


def cut_short(summary: LevelSummary, c: LevelColumns) -> LevelSummary:
    """A level with records but no end (the sweep was stopped or killed, or a client worker died): its figures
    come from the requests that finished, and it is not a valid measurement of the load it was meant to be."""
    workers = c.counts["worker"]
    reason = ("cut short before its end (the sweep was stopped, or a client worker died): figures from the "
              "requests that finished")
    num_workers = max(len(np.unique(workers[workers != NONE])), 1)
    return replace(summary, is_valid=False, invalid_reasons=[*summary.invalid_reasons, reason],
                   client=replace(summary.client, num_workers=num_workers))


def machine_notes(machine: MachineLoad | None) -> list[str]:
    """A level that shared the machine's cores with other work (or lost them to the hypervisor) may read lower
    than the engine and the client can do: said above MAX_OUTSIDE_CORES of a core."""
    if machine is None:
        return []
    notes = []
    if machine.others_cores > MAX_OUTSIDE_CORES:
        busiest = ", ".join(f"{p.name} (pid {p.pid}) {p.cpu_s / machine.wall_s:.2f}" for p in machine.busiest)
        notes.append(f"the machine was busy: processes outside the run used {machine.others_cores:.2f} of a core "
                     f"while this level ran{f' ({busiest})' if busiest else ''}, so its figures may be lower "
                     "than the engine and the client can do")
    if machine.steal_cores > MAX_OUTSIDE_CORES:
        notes.append(f"the hypervisor held back {machine.steal_cores:.2f} of a core (steal time) while this level "
                     "ran, so its figures may be lower than this machine can do")
    return notes


def _mean(values: np.ndarray) -> float:
    return float(np.mean(values)) if values.size else math.nan
