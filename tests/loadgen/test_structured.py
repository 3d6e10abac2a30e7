"""Shaped answers judged (loadgen.structured): JSON, a schema, tool calls. A verdict says why an answer is invalid in
words of its own and the schema's path, never the answer's text; bad schema and tools files are refused by name."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError

from loadgen.replay.formats import DatasetError, read_dataset
from loadgen.structured import (
    Structure,
    StructureError,
    ToolCall,
    ToolCallParts,
    json_schema_format,
    judge,
    load_structure,
)
from loadgen.workload import StructuredSettings, Workload
from scripted.shapes import ShapeCounts, _broken, example

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
          "required": ["name", "age"], "additionalProperties": False}
TOOLS = ({"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "find_store", "parameters": {"type": "object"}}})
SCHEMA_ASKED = Structure("json_schema person.json", json_schema_format(SCHEMA, "person"))
SHIPPED = Path(str(resources.files("scenarios"))) / "data"


def test_an_answer_that_matches_its_schema_is_valid_and_one_that_breaks_it_says_where_not_what() -> None:
    good = judge(SCHEMA_ASKED, '{"name": "Ada", "age": 36}', [], "stop")
    assert good.valid and good.parsed and good.schema_valid and good.fault is None
    secret = '{"name": "SECRET-CUSTOMER-NAME", "age": -4}'
    bad = judge(SCHEMA_ASKED, secret, [], "stop")
    assert not bad.valid and bad.parsed and bad.schema_valid is False and bad.fault == "schema"
    assert bad.note == "schema: minimum at properties/age/minimum"
    missing = judge(SCHEMA_ASKED, '{"name": "SECRET-CUSTOMER-NAME"}', [], "stop")
    assert missing.note == "schema: required at required" and "SECRET" not in (missing.note or "")


def test_text_that_is_not_json_is_not_json_and_an_answer_cut_at_max_tokens_says_so() -> None:
    assert judge(SCHEMA_ASKED, "Sure! Here it is", [], "stop").fault == "not_json"
    cut = judge(SCHEMA_ASKED, '{"name": "Ada", "ag', [], "length")
    assert not cut.valid and cut.fault == "cut" and cut.note == "cut at max_tokens (not JSON)"
    json_object = Structure("json_object", {"type": "json_object"})
    assert judge(json_object, '{"any": [1, 2]}', [], "stop").valid
    listed = judge(json_object, "[1, 2]", [], "stop")
    assert not listed.valid and listed.fault == "not_object"


def test_tool_calls_are_judged_by_name_and_arguments_and_required_means_a_call() -> None:
    required = Structure("tools", None, TOOLS, "required")
    good = judge(required, "", [ToolCall("get_weather", '{"city": "Lyon"}')], "tool_calls")
    assert good.valid and good.tool_valid and good.num_tool_calls == 1
    assert judge(required, "It is sunny.", [], "stop").fault == "no_tool_call"
    unknown = judge(required, "", [ToolCall("rm_rf_everything", "{}")], "tool_calls")
    assert unknown.fault == "unknown_tool" and "rm_rf" not in (unknown.note or "")
    broken = judge(required, "", [ToolCall("get_weather", '{"city": ')], "tool_calls")
    assert broken.fault == "tool_arguments" and broken.parsed is False
    wrong = judge(required, "", [ToolCall("get_weather", '{"town": "Lyon"}')], "tool_calls")
    assert wrong.fault == "tool_arguments" and wrong.note == "call 1 to get_weather: schema: required at required"
    named = Structure("tools", None, TOOLS, "find_store")
    assert judge(named, "", [ToolCall("get_weather", '{"city": "Lyon"}')], "tool_calls").note == \
        "call 1 is not to find_store"


def test_with_tool_choice_auto_an_answer_in_words_is_valid() -> None:
    auto = Structure("tools", None, TOOLS, "auto")
    said = judge(auto, "I can't check the weather.", [], "stop")
    assert said.valid and said.num_tool_calls == 0 and said.tool_valid is None
    assert auto.body_fields()["tool_choice"] == "auto"
    assert Structure("tools", None, TOOLS, "find_store").body_fields()["tool_choice"] == \
        {"type": "function", "function": {"name": "find_store"}}


def test_streamed_tool_call_pieces_are_put_together_by_index() -> None:
    parts = ToolCallParts()
    assert parts.add([{"index": 0, "id": "c0", "function": {"name": "get_weather", "arguments": ""}}]) == "get_weather"
    assert parts.add([{"index": 0, "function": {"arguments": '{"city": '}}]) == '{"city": '
    parts.add([{"index": 1, "function": {"name": "find_store", "arguments": "{}"}}])
    parts.add([{"index": 0, "function": {"arguments": '"Lyon"}'}}])
    parts.add("not a list")  # a hostile delta is ignored, not fatal
    assert parts.calls() == [ToolCall("get_weather", '{"city": "Lyon"}'), ToolCall("find_store", "{}")]


def test_files_that_cannot_be_used_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(StructureError, match=r"structured.json_schema .*missing.json: no such file"):
        load_structure(StructuredSettings(response_format="json_schema", json_schema=str(tmp_path / "missing.json")))
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "no-such-type"}')
    with pytest.raises(StructureError, match=r"bad.json: not a valid JSON Schema"):
        load_structure(StructuredSettings(response_format="json_schema", json_schema=str(bad)))
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(list(TOOLS)))
    with pytest.raises(StructureError, match=r"tool_choice 'nope': expected auto, required or a tool's name "
                                             r"\(get_weather, find_store\)"):
        load_structure(StructuredSettings(tools=str(tools), tool_choice="nope"))
    tools.write_text('[{"type": "function", "function": {}}]')
    with pytest.raises(StructureError, match=r"tool 1: expected"):
        load_structure(StructuredSettings(tools=str(tools)))
    with pytest.raises(ValidationError, match="json_schema goes with json_schema"):
        Workload.model_validate({"structured": {"response_format": "json_schema"}})
    with pytest.raises(ValidationError, match="tool_choice needs tools"):
        Workload.model_validate({"structured": {"response_format": "json_object", "tool_choice": "required"}})


def test_the_shipped_files_load_and_name_what_they_ask(tmp_path: Path) -> None:
    schema = load_structure(StructuredSettings(response_format="json_schema",
                                               json_schema=str(SHIPPED / "support_ticket.schema.json")))
    assert schema.label == "json_schema support_ticket.schema.json"
    assert schema.body_fields()["response_format"]["json_schema"]["name"] == "support_ticket.schema"
    tools = load_structure(StructuredSettings(tools=str(SHIPPED / "support_tools.json"), tool_choice="required"))
    assert tools.label == "tools support_tools.json (required)" and len(tools.tools) == 3


def test_a_dataset_line_can_ask_its_own_shape_and_a_bad_one_names_its_line(tmp_path: Path) -> None:
    lines = [{"prompt": "Who?", "response_format": {"type": "json_schema", "json_schema": {"name": "p",
                                                                                          "schema": SCHEMA}}},
             {"prompt": "Weather?", "tools": list(TOOLS), "tool_choice": {"type": "function",
                                                                          "function": {"name": "get_weather"}}},
             {"prompt": "Plain"}]
    path = tmp_path / "shaped.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    first, second, third = read_dataset(path).conversations
    assert first.structure is not None and first.structure.schema == SCHEMA
    assert second.structure is not None and second.structure.tool_choice == "get_weather"
    assert third.structure is None
    path.write_text(json.dumps({"prompt": "x", "response_format": {"type": "yaml"}}) + "\n")
    with pytest.raises(DatasetError, match=r"shaped.jsonl:1: response_format: expected type json_object or "
                                           r"json_schema, got 'yaml'"):
        read_dataset(path)


@pytest.mark.parametrize("name", ["support_ticket.schema.json"])
def test_the_scripted_servers_answers_are_valid_and_its_broken_ones_are_not(name: str) -> None:
    schema = orjson.loads((SHIPPED / name).read_bytes())
    asked = Structure("s", json_schema_format(schema, "s"))
    value = example(schema)
    assert judge(asked, orjson.dumps(value).decode(), [], "stop").valid
    assert judge(asked, orjson.dumps(_broken(schema, value)).decode(), [], "stop").fault == "schema"
    for tool in orjson.loads((SHIPPED / "support_tools.json").read_bytes()):
        parameters = tool["function"]["parameters"]
        call = ToolCall(tool["function"]["name"], orjson.dumps(example(parameters)).decode())
        assert judge(Structure("t", None, (tool,), "required"), "", [call], "tool_calls").valid


def test_the_scripted_share_of_valid_answers_is_exact_over_any_count() -> None:
    counts = ShapeCounts()
    decided = [counts.next_is_valid(0.75) for _ in range(40)]
    assert all(sum(decided[:n]) == (3 * n) // 4 for n in range(1, 41))
    assert counts.report_and_clear() == {"answered": 40, "valid": 30}
