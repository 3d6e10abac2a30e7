"""Agent sessions replayed end to end against the scripted server (known TTFT and ITL): every call sent when
the replay rules say, subagents and joins included; prompts that share text exactly as their hash ids do;
the level's session figures; and the whole path through `bench sweep`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.arrivals import Level
from loadgen.client import ClientOptions
from loadgen.datasets import iter_requests
from loadgen.metrics import summarize
from loadgen.recorder import JsonlWriter, read_records
from loadgen.runner import LevelBounds, LevelContext, run_level_blocking
from loadgen.sessions.formats import read_sessions
from loadgen.sessions.runner import SessionLevel
from loadgen.sessions.stream import SessionStream
from loadgen.types import RequestRecord
from loadgen.workload import LengthDistribution, Workload
from tests.bench.test_cli import bench, only_run_dir, sweep_args
from tests.e2e.test_resume import kill_during_level

BLOCK = 16
SLACK_S = 0.006  # a few ms: asyncio's timers, the start gate, this shared machine


def call(t: float, num_in: int, num_out: int, num_ids: int, **extra: object) -> dict:
    return {"t": t, "type": "n", "in": num_in, "out": num_out, "hash_ids": list(range(num_ids)), **extra}


def weka_sessions() -> list[dict]:
    """Session A: two subagents listed together after call 1 (one joined by call 3, both by then ended in the
    trace), a think time derived from api_time, one capped; session B: two plain calls."""
    sub_long = {"t": 0.1, "type": "subagent", "agent_id": "explore", "duration_ms": 300, "status": "completed",
                "requests": [call(0.1, 40, 3, 2), call(0.2, 60, 3, 3, think_time=0.2)]}
    sub_short = {"t": 0.1, "type": "subagent", "agent_id": "lookup", "duration_ms": 50,
                 "requests": [call(0.1, 20, 2, 1)]}
    a = {"id": "A", "block_size": BLOCK, "requests": [
        call(0.0, 40, 4, 3), sub_long, sub_short,
        call(0.12, 70, 4, 5, think_time=0.1),  # before explore's end in the trace: runs beside it
        call(0.5, 100, 4, 7, think_time=0.05, api_time=0.06),  # at or past both ends: joins them
        call(0.76, 120, 4, 8),  # no think_time: t - t_prev - api_time_prev = 0.2
        call(9.0, 130, 2, 9, think_time=30.0)]}  # capped by max_think_s
    b = {"id": "B", "block_size": BLOCK, "requests": [call(0.0, 30, 3, 2), call(0.3, 50, 3, 4, think_time=0.08)]}
    return [a, b]


def run_sessions_level(scripted, path: Path, out: Path, level: Level, bounds: LevelBounds,
                       max_think_s: float = 0.3) -> list[RequestRecord]:
    stream = SessionStream(read_sessions(path), seed=0, max_think_s=max_think_s)
    with JsonlWriter(out) as writer:
        ctx = LevelContext("test", "scripted", level, ClientOptions(scripted.base_url, "scripted"), writer,
                           keep_text=True)
        run_level_blocking(ctx, bounds, SessionLevel(stream),
                           iter_requests(Workload(input_tokens=LengthDistribution(value=8))))
    return [r for r in read_records(out) if not r.is_warmup]


def by_place(records: list[RequestRecord], session: str) -> dict[tuple[str, int], RequestRecord]:
    return {(r.agent, r.step): r for r in records if r.session_id == session}


@pytest.mark.serial  # send times within a few ms are asserted: run alone
def test_each_call_is_sent_when_the_replay_rules_say(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=20, itl_ms=2)
    path = tmp_path / "agents.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in weka_sessions()))
    records = run_sessions_level(scripted, path, tmp_path / "c1.jsonl", Level("concurrency", 1),
                                 LevelBounds(duration_s=30, max_sessions=3))
    assert all(r.ok for r in records)
    a, b, again = by_place(records, "A"), by_place(records, "B"), by_place(records, "A#2")
    assert len(a) == 8 and len(b) == 2 and len(again) == 8  # --sessions 3 with two in the file: A replayed again

    def end(r: RequestRecord) -> float:
        assert r.end_s is not None
        return r.end_s

    expected = {  # (agent, step) -> when the rules say it is sent
        ("explore", 1): end(a["main", 1]), ("lookup", 1): end(a["main", 1]),
        ("explore", 2): end(a["explore", 1]) + 0.2,
        ("main", 2): end(a["main", 1]) + 0.1,
        ("main", 3): max(end(a["main", 2]), end(a["explore", 2]), end(a["lookup", 1])) + 0.05,
        ("main", 4): end(a["main", 3]) + 0.2,
        ("main", 5): end(a["main", 4]) + 0.3,
    }
    errors_ms = {place: (a[place].dispatch_s - due) * 1000 for place, due in expected.items()}
    print(f"\nsent - due (ms): { {f'{k[0]}.{k[1]}': round(v, 2) for k, v in errors_ms.items()} }")
    assert all(-0.5 < e < SLACK_S * 1000 for e in errors_ms.values()), errors_ms
    assert a["main", 2].dispatch_s < a["explore", 2].dispatch_s  # call 2 ran beside the subagent: no join
    assert end(a["explore", 2]) > end(a["main", 2])  # and call 3 waited for the subagent (the join), not call 2
    assert b["main", 1].dispatch_s >= end(a["main", 5]) - 0.001  # one user: the next session after this one
    assert b["main", 2].dispatch_s - end(b["main", 1]) == pytest.approx(0.08, abs=SLACK_S)

    trace = {r["id"]: r["requests"] for r in weka_sessions()}
    main_calls = [r for r in trace["A"] if r["type"] != "subagent"]
    for step, row in enumerate(main_calls, start=1):
        sent = a["main", step]
        assert sent.max_tokens == row["out"] and sent.prompt_tokens == row["in"]
        assert sent.session_requests == 8


def blocks(record: RequestRecord) -> list[str]:
    assert record.prompt_text is not None
    words = record.prompt_text.split(" ")
    return [" ".join(words[i:i + BLOCK]) for i in range(0, len(words), BLOCK)]


def test_prompts_share_leading_text_as_their_hash_ids_do_and_nothing_more(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=1, itl_ms=1)
    path = tmp_path / "agents.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in weka_sessions()))
    records = run_sessions_level(scripted, path, tmp_path / "c2.jsonl", Level("concurrency", 2),
                                 LevelBounds(duration_s=30, max_sessions=4), max_think_s=0.01)
    a, b, again = by_place(records, "A"), by_place(records, "B"), by_place(records, "A#2")
    main = [blocks(a["main", step]) for step in range(1, 6)]
    for earlier, later in zip(main, main[1:], strict=False):
        full = len(earlier) - 1  # its last block was cut to the call's length: the later call has it whole
        assert later[:full] == earlier[:full] and later[full].startswith(earlier[full])
    seen = {block for r in a.values() for block in blocks(r)}
    # The subagents use hash ids 0.. too, from a fresh context: nothing in common with the main agent's
    assert not set(blocks(a["explore", 1])) & set(blocks(a["main", 1]))
    assert not seen & {block for r in b.values() for block in blocks(r)}  # another session: nothing shared
    assert not seen & {block for r in again.values() for block in blocks(r)}  # A replayed again: nothing shared
    implied = [a["main", step].implied_cached_tokens for step in range(1, 6)]
    assert implied == [0, 40, 70, 100, 120]  # each call's whole previous prompt, as its ids say


def test_a_sessions_level_reports_sessions_their_durations_and_hit_rates(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=10, itl_ms=1, prefix_cache_block_words=BLOCK)
    path = tmp_path / "agents.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in weka_sessions()))
    records = run_sessions_level(scripted, path, tmp_path / "c2.jsonl", Level("concurrency", 2),
                                 LevelBounds(duration_s=30, max_sessions=6), max_think_s=0.05)
    summary = summarize(records)
    figures = summary.sessions
    assert figures is not None and summary.is_valid, summary.invalid_reasons
    sessions: dict[str, list[RequestRecord]] = {}
    for r in records:
        sessions.setdefault(r.session_id, []).append(r)
    done = {k: v for k, v in sessions.items() if len(v) == v[0].session_requests}
    assert figures.num_started == len(sessions) and figures.num_completed == len(done) >= 6
    assert figures.num_cut == len(sessions) - len(done) and figures.num_failed == 0
    durations = [max(r.end_s for r in v) - min(r.send_s for r in v) for v in done.values()]
    assert figures.duration_s.p50 == pytest.approx(float(np.percentile(durations, 50)))
    assert figures.requests_per_session.mean == pytest.approx(np.mean([len(v) for v in done.values()]))
    assert figures.num_subagent_requests == sum(r.agent != "main" for r in records)
    assert set(figures.ttft_ms_by_step) == {"1", "2-5", "6-20", "21+"}
    assert figures.ttft_ms_by_step["6-20"].mean is None  # no agent here reaches step 6
    # The scripted server's cache holds every prompt's whole blocks of 16 words: what the trace's ids imply, down
    # to a whole block (it leaves out a cached count of 0).
    for r in records:
        assert (r.cached_tokens or 0) == r.implied_cached_tokens // BLOCK * BLOCK, r
    prompt = sum(r.prompt_tokens for r in records)
    assert figures.implied_hit_rate == pytest.approx(sum(r.implied_cached_tokens for r in records) / prompt)
    assert figures.measured_hit_rate == pytest.approx(sum(r.cached_tokens or 0 for r in records) / prompt)
    assert summary.to_json()["sessions"]["num_completed"] == figures.num_completed


def test_sessions_arrive_at_a_rate_and_a_call_past_the_context_fails_its_session(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=2, itl_ms=1)
    path = tmp_path / "agents.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in weka_sessions()))
    stream = SessionStream(read_sessions(path), max_think_s=0.01, max_model_len=100)
    with JsonlWriter(tmp_path / "r.jsonl") as writer:
        ctx = LevelContext("test", "scripted", Level("rate", 20.0), ClientOptions(scripted.base_url, "scripted"),
                           writer)
        run_level_blocking(ctx, LevelBounds(duration_s=1.0), SessionLevel(stream),
                           iter_requests(Workload(input_tokens=LengthDistribution(value=8))))
    records = [r for r in read_records(tmp_path / "r.jsonl") if not r.is_warmup]
    firsts = sorted(r.scheduled_s for r in records if r.scheduled_s is not None)
    assert len(firsts) >= 8 and all(r.agent == "main" and r.step == 1 for r in records if r.scheduled_s is not None)
    overflow = [r for r in records if r.error_kind == "context_overflow"]
    # A's call 3 (100 + 4 tokens) is longer than the context: not sent, and the session ends there.
    assert overflow and all(r.session_id.startswith("A") and r.step == 4 - 1 for r in overflow)
    assert not any(r.session_id.startswith("A") and r.agent == "main" and r.step > 3 for r in records)
    summary = summarize(records)
    assert summary.kind == "rate" and summary.sessions is not None
    assert summary.sessions.num_failed == len(overflow) and summary.sessions.num_context_overflow == len(overflow)
    assert not summary.is_valid and "need more than the model's context" in " ".join(summary.invalid_reasons)


def test_bench_sweep_replays_the_shipped_agent_scenario_and_says_what_a_session_load_needs(scripted,
                                                                                        tmp_path) -> None:
    scripted.set_script(ttft_ms=5, itl_ms=1)
    result = bench(*sweep_args(scripted, tmp_path / "runs", "--scenario", "agent", "--concurrency", "4",
                               "--sessions", "4", "--max-think-s", "0.2"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "agent sessions" in result.stdout and "hit rate implied/measured" in result.stdout
    run_dir = only_run_dir(tmp_path / "runs")
    (summary,) = json.loads((run_dir / "summary.json").read_text())
    assert summary["sessions"]["num_completed"] >= 4
    run = json.loads((run_dir / "run.json").read_text())
    assert run["dataset"]["format"] == "weka" and run["dataset"]["num_entries"] == 4
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert all(r["session_id"] and r["agent"] and r["step"] for r in rows if not r["is_warmup"])
    report = json.loads((run_dir / "report.json").read_text())
    sessions = report["agent_sessions"]
    tasks = sessions["tasks"]
    assert tasks["costs"]["usd_per_task"] > 0 and tasks["costs"]["tasks_per_hour_per_gpu"] > 0
    assert tasks["headline"] in (run_dir / "report.md").read_text() and "per task" in tasks["headline"]
    assert sessions["engines"][0]["lane"]["bars"] and {"agent_sessions", "session_lane"} <= {
        p["name"] for p in report["plots"]}

    data = Path(__file__).resolve().parents[2] / "scenarios" / "data" / "agent.tracelab.jsonl"
    refused = bench(*sweep_args(scripted, tmp_path / "none", "--dataset", str(data), "--no-report"))
    assert refused.returncode == 2
    assert "add --concurrency N (N sessions alive at once" in refused.stderr and "--rate R" in refused.stderr


def test_synthetic_agents_and_an_otel_export_are_replayed_and_split_workers_are_refused(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=2, itl_ms=1)
    result = bench(*sweep_args(scripted, tmp_path / "synthetic", "--workload", "agent", "--concurrency", "3",
                               "--sessions", "3", "--max-think-s", "0.05", "--no-report"), timeout=120)
    assert result.returncode == 0, result.stderr
    (summary,) = json.loads((only_run_dir(tmp_path / "synthetic") / "summary.json").read_text())
    assert summary["sessions"]["num_completed"] >= 3 and summary["sessions"]["implied_hit_rate"] > 0.5
    run = json.loads((only_run_dir(tmp_path / "synthetic") / "run.json").read_text())
    assert run["dataset"]["format"] == "agent" and run["dataset"]["num_entries"] == 64

    data = Path(__file__).resolve().parents[2] / "scenarios" / "data"
    result = bench(*sweep_args(scripted, tmp_path / "otel", "--dataset", str(data / "agent.otel.json"),
                               "--concurrency", "2", "--sessions", "2", "--no-report"), timeout=120)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (only_run_dir(tmp_path / "otel") / "requests.jsonl").read_text().splitlines()]
    spans = read_sessions(data / "agent.otel.json").sessions
    calls = {s.session_id: [c.input_tokens for c in s.main.calls] for s in spans}
    sent = {}
    for r in sorted((r for r in rows if not r["is_warmup"]), key=lambda r: r["step"]):
        sent.setdefault(r["session_id"], []).append(r["prompt_tokens"])
    assert any(sent.get(trace) == inputs for trace, inputs in calls.items())  # the scripted server counts words

    refused = bench(*sweep_args(scripted, tmp_path / "workers", "--scenario", "agent", "--concurrency", "2",
                                "--workers", "2", "--no-report"))
    assert refused.returncode == 2 and "agent sessions run in one client process" in refused.stderr


def test_a_killed_sessions_run_resumes_with_sessions_and_request_ids_it_never_used(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=5, itl_ms=2)
    out = tmp_path / "runs"
    args = sweep_args(scripted, out, "--scenario", "agent", "--concurrency", "2,3", "--duration", "2",
                      "--max-think-s", "0.1", "--no-report")
    run_dir = kill_during_level(scripted, out, "c3", args)
    before = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    started = {r["session_id"] for r in before if r.get("session_id")}
    result = bench("sweep", "--resume", str(run_dir), timeout=120)
    assert result.returncode == 0, result.stderr
    after = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    again = [r for r in after if r["level"] == "c3" and not r["is_warmup"]]
    assert again and not {r["session_id"] for r in again} & started  # no session replayed as it was
    ids = [r["request_id"] for r in after if not r["is_warmup"]]
    assert len(ids) == len(set(ids))
