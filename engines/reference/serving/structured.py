"""Structured outputs and tool calls in OpenAI's API, served by constrained decoding (core/grammar.py).

Contract: `read_structure(body)` reads `response_format` and `tools` / `tool_choice` into what to constrain (a
`core.grammar.Constraint`) and, for a tool call, how to give the answer back (`ToolCallPlan`), or raises ApiError
naming the field. Served: response_format `json_object` and `json_schema`; tools with tool_choice `required` or a
named function (`none`: tools offered, none called, nothing constrained). `auto` needs a parser of the model's own
tool-call format, which this engine lacks, so it is refused as vLLM refuses it without one. A named call's answer is
its arguments, held to the tool's parameters; a required one is `{"name": ..., "arguments": ...}` held to one of
the tools, and `ToolCallStream` turns that text into OpenAI's `tool_calls` deltas as it streams.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from engines.reference.core.grammar import Constraint

_REQUIRED_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')


class StructureRequestError(ValueError):
    """A field this module can't serve; `param` names it (the server answers it as a 400)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ToolCallPlan:
    """How a constrained answer becomes a tool call: `named` (its text is the arguments), else the wrapper object."""

    named: str | None
    tools: tuple[str, ...]


@dataclass(frozen=True)
class Structure:
    constraint: Constraint | None = None
    tool_call: ToolCallPlan | None = None
    tools: tuple[dict[str, Any], ...] = ()  # as given, for the chat template


def read_structure(body: dict[str, Any]) -> Structure:
    response_format = body.get("response_format")
    tools = _read_tools(body.get("tools"))
    choice = body.get("tool_choice")
    if not tools:
        if choice not in (None, "none"):
            raise StructureRequestError("tool_choice needs tools", "tool_choice")
        return Structure(_response_constraint(response_format))
    if response_format not in (None, {"type": "text"}) and choice != "none":
        raise StructureRequestError("response_format beside a tool call is not supported: ask for one of them",
                                    "response_format")
    if choice == "none":
        return Structure(_response_constraint(response_format), tools=tools)
    return _tool_structure(tools, choice)


def _response_constraint(response_format: Any) -> Constraint | None:
    if response_format is None or response_format == {"type": "text"}:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_object":
        return Constraint.json_object()
    if kind == "json_schema":
        inner = response_format.get("json_schema")
        schema = inner.get("schema") if isinstance(inner, dict) else None
        if not isinstance(schema, dict):
            raise StructureRequestError("response_format.json_schema.schema must be a JSON Schema (an object)",
                                        "response_format.json_schema.schema")
        return Constraint.json_schema(schema)
    raise StructureRequestError("response_format.type must be text, json_object or json_schema, got "
                                f"{str(kind)[:40]!r}", "response_format.type")


def _read_tools(tools: Any) -> tuple[dict[str, Any], ...]:
    if tools is None or tools == []:
        return ()
    if not isinstance(tools, list):
        raise StructureRequestError("tools must be a list of {type: function, function: {name, parameters}}", "tools")
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        is_function = isinstance(function, dict) and tool.get("type") == "function"
        if not is_function or not isinstance(function.get("name"), str) \
                or not isinstance(function.get("parameters", {}), dict):
            raise StructureRequestError(f"tools[{index}] must be {{type: function, function: {{name, parameters}}}}",
                                        f"tools[{index}]")
    return tuple(tools)


def _tool_structure(tools: tuple[dict[str, Any], ...], choice: Any) -> Structure:
    names = tuple(tool["function"]["name"] for tool in tools)
    parameters = {tool["function"]["name"]: tool["function"].get("parameters") or {"type": "object"} for tool in tools}
    if choice == "required":
        wrappers = [{"type": "object", "properties": {"name": {"const": name}, "arguments": parameters[name]},
                     "required": ["name", "arguments"], "additionalProperties": False} for name in names]
        schema = wrappers[0] if len(wrappers) == 1 else {"anyOf": wrappers}
        return Structure(Constraint.json_schema(schema), ToolCallPlan(None, names), tools)
    named = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    if isinstance(named, str) and named in parameters:
        return Structure(Constraint.json_schema(parameters[named]), ToolCallPlan(named, names), tools)
    if choice in (None, "auto"):
        raise StructureRequestError("tool_choice auto (the default with tools) needs a parser of the model's own "
                                    "tool-call format, which the reference engine lacks: ask tool_choice required "
                                    "or a named function", "tool_choice")
    raise StructureRequestError(f"tool_choice must be none, required or {{type: function, function: {{name}}}} naming "
                                f"one of the tools ({', '.join(names)})", "tool_choice")


@dataclass
class ToolCallStream:
    """A constrained answer's text, as it streams, turned into `tool_calls` deltas: the call's id, type and name
    in the first, its arguments in pieces after. A required call's text is `{"name": N, "arguments": A}`: the name
    is read once the text reaches its arguments, and one character is held back until the end, since the closing
    brace is the wrapper's."""

    plan: ToolCallPlan
    text: str = ""
    name: str | None = None
    arguments_start: int | None = None
    num_sent: int = 0  # characters of the arguments sent
    started: bool = False  # the first delta (id, type, name) sent
    call_id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def __post_init__(self) -> None:
        if self.plan.named is not None:
            self.name, self.arguments_start = self.plan.named, 0

    def feed(self, new_text: str, finished: bool) -> list[dict[str, Any]]:
        """The deltas this much more text makes (none while the name is still incomplete)."""
        self.text += new_text
        if self.arguments_start is None:
            head = _REQUIRED_HEAD.match(self.text)
            if head is None:
                return []
            self.name, self.arguments_start = json.loads(f'"{head.group(1)}"'), head.end()
        arguments = self.text[self.arguments_start:]
        if self.plan.named is None:
            arguments = arguments.rstrip().removesuffix("}").rstrip() if finished else arguments[:-1]
        piece = arguments[self.num_sent:]
        if not piece and self.started:
            return []
        self.num_sent += len(piece)
        if not self.started:
            self.started = True
            return [{"index": 0, "id": self.call_id, "type": "function",
                     "function": {"name": self.name, "arguments": piece}}]
        return [{"index": 0, "function": {"arguments": piece}}]

    def whole(self) -> list[dict[str, Any]]:
        """The finished call, as a non-streamed message holds it (call after the last `feed`)."""
        arguments = self.text[self.arguments_start or 0:]
        if self.plan.named is None:
            arguments = arguments.rstrip().removesuffix("}").rstrip()
        return [{"id": self.call_id, "type": "function", "function": {"name": self.name or "", "arguments": arguments}}]


def tool_call_finish_reason(finish_reason: str | None) -> str | None:
    """A call that ended on its own ends as OpenAI says it: `tool_calls` (one cut at max_tokens stays `length`)."""
    return "tool_calls" if finish_reason == "stop" else finish_reason


def tool_call_delta(deltas: list[dict[str, Any]], finish_reason: str | None, role: str | None) -> dict[str, Any]:
    """A streamed chunk's choice carrying tool_calls deltas (none on a last chunk that only ends the call)."""
    delta: dict[str, Any] = {"role": role} if role else {}
    if deltas:
        delta["tool_calls"] = deltas
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": tool_call_finish_reason(finish_reason)}


def tool_call_choice(calls: list[dict[str, Any]], finish_reason: str | None) -> dict[str, Any]:
    """A non-streamed answer's choice: the assistant's message holding the call."""
    return {"index": 0, "message": {"role": "assistant", "content": None, "refusal": None, "tool_calls": calls},
            "logprobs": None, "finish_reason": tool_call_finish_reason(finish_reason)}
