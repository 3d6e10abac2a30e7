"""Session datasets read: the shipped samples in each format, the replay rules drawn from them, and malformed
files refused naming the file, the line or session, and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.replay.formats import DatasetError
from loadgen.sessions.formats import detect_session_format, read_sessions
from loadgen.sessions.model import Agent
from loadgen.sessions.schedule import plan_agent
from loadgen.sessions.synthetic import draw_sessions
from loadgen.workload import AgentWorkload, parse_length_spec

DATA = Path(__file__).resolve().parents[2] / "scenarios" / "data"


def test_the_shipped_samples_are_read_in_each_format_with_their_subagents_and_waits() -> None:
    weka = read_sessions(DATA / "agent.weka.jsonl")
    assert weka.format == "weka" and len(weka.sessions) == 4 and weka.sessions[0].block_tokens == 64
    with_subagent = [s for s in weka.sessions if len(s.main.agents()) > 1]
    assert len(with_subagent) == 2
    plan = plan_agent(with_subagent[0].main)
    assert plan.steps[1].starts == (0,) and any(step.joins == (0,) for step in plan.steps[2:])

    tracelab = read_sessions(DATA / "agent.tracelab.jsonl")
    assert tracelab.format == "tracelab" and len(tracelab.sessions) == 3
    rows = [json.loads(line) for line in (DATA / "agent.tracelab.jsonl").read_text().splitlines()]
    first = [r for r in rows if r["session_id"] == "tl-1"]
    calls = tracelab.sessions[0].main.calls
    assert [c.input_tokens for c in calls] == [r["input_tokens_total"] for r in first]
    assert [c.think_s for c in calls[1:]] == [r["tools"][0]["tool_wall_latency_ms"] / 1000 for r in first[:-1]]
    for previous, call, row in zip(calls, calls[1:], first[1:], strict=False):  # the prefix is the last context
        kept = row["prefix_tokens"] // 64
        assert call.hash_ids[:kept] == previous.hash_ids[:kept]

    otel = read_sessions(DATA / "agent.otel.json")
    assert otel.format == "otel" and len(otel.sessions) == 2
    chain = otel.sessions[0].main.calls
    assert len(chain) == 4 and all(abs(c.think_s - w) < 1e-6 for c, w in zip(chain[1:], (0.3, 0.4, 0.5),
                                                                               strict=True))
    assert chain[1].hash_ids[:2] == chain[0].hash_ids[:2]  # its input repeats the earlier messages


def test_otel_spans_that_follow_one_call_together_start_subagents(tmp_path) -> None:
    def span(span_id: str, start_ms: int, end_ms: int, inputs: list, outputs: list) -> dict:
        attrs = {"gen_ai.usage.input_tokens": 200, "gen_ai.usage.output_tokens": 8,
                 "gen_ai.input.messages": json.dumps(inputs), "gen_ai.output.messages": json.dumps(outputs)}
        return {"trace_id": "t1", "span_id": span_id, "start_time": start_ms * 1_000_000,
                "end_time": end_ms * 1_000_000, "attributes": attrs}

    plan_msg = {"role": "assistant", "content": "plan"}
    spans = [span("a", 0, 100, [{"role": "user", "content": "go"}], [plan_msg]),
             span("b", 150, 200, [plan_msg, {"role": "user", "content": "part 1"}], []),
             span("c", 160, 220, [plan_msg, {"role": "user", "content": "part 2"}], [])]
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(spans))
    (session,) = read_sessions(path, "otel").sessions
    main = session.main
    assert [type(item).__name__ for item in main.items] == ["Call", "Agent", "Call"]
    sub = main.items[1]
    assert isinstance(sub, Agent) and sub.delay_s == pytest.approx(0.06)
    assert main.calls[1].think_s == pytest.approx(0.05)


def test_a_synthetic_agent_workload_is_drawn_the_same_from_the_same_seed() -> None:
    workload = AgentWorkload(sessions=8, steps=parse_length_spec("6"), subagent_probability=0.5)
    first, again = draw_sessions(workload, seed=3), draw_sessions(workload, seed=3)
    assert first == again and first != draw_sessions(workload, seed=4)
    session = first.sessions[0]
    calls = session.main.calls
    assert len(calls) == 6 and session.shared_prefix_tokens == 1024
    for earlier, later in zip(calls, calls[1:], strict=False):  # the context grows by an answer and a tool result
        assert later.input_tokens > earlier.input_tokens + earlier.output_tokens
        assert later.hash_ids[: len(earlier.hash_ids)] == earlier.hash_ids
    assert any(len(s.main.agents()) > 1 for s in first.sessions)
    assert AgentWorkload.model_validate({"steps": "uniform:2:3"}).steps.max == 3


@pytest.mark.parametrize(("name", "text", "said"), [
    ("no-id.jsonl", '{"block_size": 64, "requests": []}\n', "field 'id' must be a string"),
    ("bad-in.jsonl", '{"id": "s1", "requests": [{"t": 0, "in": 0, "out": 4}]}\n',
     ":1 (session s1): requests[0]: field 'in' must be a whole number >= 1 (got 0)"),
    ("bad-t.jsonl", '{"id": "s1", "requests": [{"in": 5, "out": 4}]}\n', "requests[0]: field 't' must be a number"),
    ("bad-sub.jsonl", '{"id": 7, "requests": [{"t": 0, "in": 5, "out": 4}, {"t": 1, "type": "subagent", '
     '"duration_ms": 5, "requests": []}]}\n', "requests[1]: a subagent needs a non-empty string 'agent_id'"),
    ("bad-ids.jsonl", '{"id": "s", "requests": [{"t": 0, "in": 5, "out": 4, "hash_ids": ["x"]}]}\n',
     "field 'hash_ids' must be a list of whole numbers"),
    ("round.jsonl", '{"session_id": "a", "round_index": 0, "input_tokens_total": 10, "prefix_tokens": 20, '
     '"output_tokens": 3, "tools": []}\n', ":1 (session a): field 'prefix_tokens' (20) is more than"),
    ("tools.jsonl", '{"session_id": "a", "round_index": 0, "input_tokens_total": 10, "prefix_tokens": 0, '
     '"output_tokens": 3, "tools": [{"tool_name": "x"}]}\n', "tools[0]: field 'tool_wall_latency_ms' must be"),
    ("span.json", '[{"trace_id": "t", "start_time": "soon", "attributes": {"gen_ai.usage.input_tokens": 3}}]',
     "span 1: field 'start_time': expected nanoseconds since the epoch or an ISO 8601 time"),
])
def test_a_malformed_session_file_is_refused_naming_the_file_the_line_or_session_and_the_field(
        tmp_path, name, text, said) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DatasetError) as caught:
        read_sessions(path)
    assert str(path) in str(caught.value) and said in str(caught.value)


def test_formats_are_told_from_the_content() -> None:
    assert detect_session_format(Path("x"), '{"id": 1, "block_size": 64, "requests": []}') == "weka"
    assert detect_session_format(Path("x"), '{"session_id": 1, "round_index": 0}\n') == "tracelab"
    assert detect_session_format(Path("x"), '{"resourceSpans": []}') == "otel"
    assert detect_session_format(Path("x"), '{"prompt": "hi"}\n') is None
