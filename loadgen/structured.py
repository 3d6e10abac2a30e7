"""Answers asked in a shape, and judged: JSON (any object, or one that matches a schema) and tool calls.

A workload's `structured` settings (`loadgen.workload.StructuredSettings`) are read once into a `Structure`: the
schema and tool files loaded and checked, the request fields built. Every request carries it, the client sends
its fields, and when the answer ends `judge` says whether it parsed, matched its schema, and called a tool
that was offered with arguments that match that tool's parameters. A verdict never quotes the answer: a team's
answers stay out of the run directory unless `keep_text` says otherwise.

As vLLM's structured-output benchmark counts it, an answer is valid when it parses as JSON and matches the
schema; ours also judges tool calls, and calls an answer cut at max_tokens invalid (with its own reason), since
that is what the caller got.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
from jsonschema import SchemaError
from jsonschema.validators import validator_for

from loadgen.types import RequestSpec, Structure, ToolChoice
from loadgen.types import StructureFault as Fault
from loadgen.workload import StructuredSettings

FORMATS = ("json_object", "json_schema")


class StructureError(ValueError):
    """A schema or tools file that can't be used, named with what would be accepted."""


@dataclass(frozen=True)
class ToolCall:
    """One tool call as streamed: the function's name and its arguments' text."""

    name: str
    arguments: str


@dataclass(frozen=True)
class Judgement:
    """One answer judged. `parsed`: the answer (or every call's arguments) parsed as JSON; `schema_valid`: it
    matched its schema or its tool's parameters (None: there was none to match, or it did not parse);
    `tool_valid`: tools were offered and every call named one with valid arguments (None: no tools, or none
    called where calling was optional)."""

    valid: bool
    parsed: bool | None = None
    schema_valid: bool | None = None
    tool_valid: bool | None = None
    num_tool_calls: int | None = None
    fault: Fault | None = None
    note: str | None = None


def judge(structure: Structure, text: str, calls: Sequence[ToolCall], finish_reason: str | None) -> Judgement:
    """The answer (its text and its tool calls) against what was asked; an invalid answer that was cut at
    max_tokens says so."""
    verdict = _judge(structure, text, calls)
    if not verdict.valid and finish_reason == "length":
        return Judgement(False, verdict.parsed, verdict.schema_valid, verdict.tool_valid, verdict.num_tool_calls,
                         "cut", f"cut at max_tokens ({verdict.note})")
    return verdict


def _judge(structure: Structure, text: str, calls: Sequence[ToolCall]) -> Judgement:
    if structure.tools:
        if calls:
            return _judge_calls(structure, calls)
        if structure.tool_choice != "auto":
            return Judgement(False, tool_valid=False, num_tool_calls=0, fault="no_tool_call",
                             note=f"no tool call (tool_choice {structure.tool_choice})")
        if structure.response_format is None:
            return Judgement(True, num_tool_calls=0)  # answered in words, as `auto` allows
    return _judge_text(structure, text, 0 if structure.tools else None)


def _judge_text(structure: Structure, text: str, num_calls: int | None) -> Judgement:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return Judgement(False, parsed=False, num_tool_calls=num_calls, fault="not_json", note="not JSON")
    if structure.schema is None:
        is_object = isinstance(value, dict)
        return Judgement(is_object, parsed=True, num_tool_calls=num_calls, fault=None if is_object else "not_object",
                         note=None if is_object else "JSON, but not an object")
    problem = schema_problem(structure.schema, value)
    return Judgement(problem is None, parsed=True, schema_valid=problem is None, num_tool_calls=num_calls,
                     fault="schema" if problem else None, note=problem)


def _judge_calls(structure: Structure, calls: Sequence[ToolCall]) -> Judgement:
    offered = structure.tool_parameters
    named = structure.tool_choice if structure.tool_choice not in ("auto", "required") else None
    for number, call in enumerate(calls, start=1):
        if call.name not in offered or (named is not None and call.name != named):
            return Judgement(False, tool_valid=False, num_tool_calls=len(calls), fault="unknown_tool",
                             note=f"call {number} names a tool not offered" if named is None else
                             f"call {number} is not to {named}")
        try:
            arguments = orjson.loads(call.arguments or "{}")
        except orjson.JSONDecodeError:
            return Judgement(False, parsed=False, tool_valid=False, num_tool_calls=len(calls),
                             fault="tool_arguments", note=f"call {number} to {call.name}: arguments not JSON")
        problem = schema_problem(offered[call.name], arguments)
        if problem is not None:
            return Judgement(False, parsed=True, schema_valid=False, tool_valid=False, num_tool_calls=len(calls),
                             fault="tool_arguments", note=f"call {number} to {call.name}: {problem}")
    return Judgement(True, parsed=True, schema_valid=True, tool_valid=True, num_tool_calls=len(calls))


def schema_problem(schema: dict[str, Any], value: Any) -> str | None:
    """Where `value` first breaks `schema`, by the schema's own path (the value is not quoted); None: it matches."""
    error = next(iter(_validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)).iter_errors(value)), None)
    if error is None:
        return None
    where = "/".join(str(part) for part in error.schema_path)
    return f"schema: {error.validator} at {where or 'the top'}"


@functools.lru_cache(maxsize=256)
def _validator(schema_json: bytes) -> Any:
    """A schema's validator, built once per schema (its draft from its `$schema`, else 2020-12)."""
    schema = orjson.loads(schema_json)
    return validator_for(schema)(schema)


def with_structure(specs: Iterator[RequestSpec], structure: Structure) -> Iterator[RequestSpec]:
    """Each request asking for `structure`, but a dataset line that asks for its own shape."""
    for spec in specs:
        yield spec if spec.structure is not None else replace(spec, structure=structure)


# --- reading the files a workload names ---------------------------------------------------------------------------

def load_structure(settings: StructuredSettings) -> Structure:
    """The workload's settings with their files read and checked (StructureError names the file and the fault)."""
    response_format, parts = None, []
    if settings.response_format == "json_object":
        response_format, parts = {"type": "json_object"}, ["json_object"]
    elif settings.json_schema is not None:
        where = f"structured.json_schema {settings.json_schema}"
        schema = check_schema(read_json_file(settings.json_schema, "structured.json_schema"), where)
        name = Path(settings.json_schema).stem
        response_format = json_schema_format(schema, name, settings.strict)
        parts = [f"json_schema {Path(settings.json_schema).name}"]
    tools: tuple[dict[str, Any], ...] = ()
    choice = settings.tool_choice
    if settings.tools is not None:
        where = f"structured.tools {settings.tools}"
        tools = check_tools(read_json_file(settings.tools, "structured.tools"), where)
        choice = check_tool_choice(choice, tools, where)
        parts.append(f"tools {Path(settings.tools).name} ({choice})")
    return Structure(", ".join(parts), response_format, tools, choice)


def check_schema(schema: Any, where: str) -> dict[str, Any]:
    """`schema` as a JSON Schema, or StructureError naming `where` and what is wrong with it."""
    if not isinstance(schema, dict):
        raise StructureError(f"{where}: expected a JSON Schema (a JSON object), got {type(schema).__name__}")
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        at = "/".join(str(part) for part in exc.path)
        raise StructureError(f"{where}: not a valid JSON Schema ({exc.message[:200]}"
                             f"{f' at {at}' if at else ''})") from None
    return schema


def read_json_file(path: str | Path, what: str) -> Any:
    file = Path(path)
    if not file.is_file():
        raise StructureError(f"{what} {path}: no such file")
    try:
        return orjson.loads(file.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise StructureError(f"{what} {path}: not JSON ({exc})") from None


def check_tools(tools: Any, where: str) -> tuple[dict[str, Any], ...]:
    """OpenAI's tool definitions: a list of {"type": "function", "function": {"name", "parameters"}}."""
    if not isinstance(tools, list) or not tools:
        raise StructureError(f"{where}: expected a non-empty JSON list of tools, each "
                             '{"type": "function", "function": {"name": ..., "parameters": {...}}}')
    checked = []
    for number, tool in enumerate(tools, start=1):
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or not isinstance(name, str) \
                or not name:
            raise StructureError(f"{where}: tool {number}: expected "
                                 '{"type": "function", "function": {"name": ..., "parameters": {...}}}')
        check_schema(function.get("parameters") or {}, f"{where}: tool {name}'s parameters")
        checked.append({"type": "function", "function": function})
    names = [tool["function"]["name"] for tool in checked]
    if len(set(names)) != len(names):
        raise StructureError(f"{where}: tool names must differ, got {', '.join(names)}")
    return tuple(checked)


def check_tool_choice(choice: str, tools: Sequence[Mapping[str, Any]], where: str) -> ToolChoice:
    names = [tool["function"]["name"] for tool in tools]
    if choice in ("auto", "required") or choice in names:
        return choice
    raise StructureError(f"{where}: tool_choice {choice!r}: expected auto, required or a tool's name "
                         f"({', '.join(names)})")


def json_schema_format(schema: dict[str, Any], name: str, strict: bool = True) -> dict[str, Any]:
    """OpenAI's response_format for a schema."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}


def response_format_of(raw: Any, where: str) -> dict[str, Any]:
    """A response_format object as written in OpenAI's shape (a dataset line's), checked."""
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        inner = raw.get("json_schema")
        if not isinstance(inner, dict) or "schema" not in inner:
            raise StructureError(f"{where}: response_format json_schema needs json_schema.schema")
        schema = check_schema(inner["schema"], f"{where}: response_format's schema")
        return json_schema_format(schema, str(inner.get("name") or "answer"), bool(inner.get("strict", True)))
    raise StructureError(f"{where}: response_format: expected type json_object or json_schema, got {kind!r}")


@dataclass
class ToolCallParts:
    """Tool calls as they stream: each call's name and its arguments in pieces, by the index each delta names."""

    names: dict[int, str] = field(default_factory=dict)
    arguments: dict[int, list[str]] = field(default_factory=dict)

    def add(self, delta_calls: Any) -> str:
        """One delta's `tool_calls`; gives the text it carried (for counting the chunk's tokens)."""
        carried = []
        for call in delta_calls if isinstance(delta_calls, list) else ():
            if not isinstance(call, dict):
                continue
            index = call.get("index", 0) if isinstance(call.get("index", 0), int) else 0
            function = call.get("function") or {}
            name, arguments = function.get("name"), function.get("arguments")
            if isinstance(name, str) and name:
                self.names[index] = self.names.get(index, "") + name
                carried.append(name)
            if isinstance(arguments, str) and arguments:
                self.arguments.setdefault(index, []).append(arguments)
                carried.append(arguments)
        return "".join(carried)

    def calls(self) -> list[ToolCall]:
        indices = sorted(set(self.names) | set(self.arguments))
        return [ToolCall(self.names.get(i, ""), "".join(self.arguments.get(i, []))) for i in indices]
