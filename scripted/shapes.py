"""Shaped answers as a scripted server plays them: a request that asks for JSON (`response_format`) or a tool call
(`tools`) is answered in that shape, valid for a set share of such requests and broken in a known way for the rest,
so a client's validity figures can be held to the truth (`GET /_shapes` says how many were answered, how many
validly, and clears that).

Which requests are valid is decided by arrival, not by chance: the n-th shaped request is valid when
floor(n * share) > floor((n - 1) * share), so any n of them hold exactly floor(n * share) valid answers. The broken
ones take their faults in turn (for a schema: cut, missing a required field, not JSON; for a tool: another tool's
name, arguments not JSON, arguments that break the parameters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

PIECE_CHARS = 4  # an answer is streamed a few characters a token


@dataclass(frozen=True)
class ShapedAnswer:
    """The answer's text a token a piece; for a tool call, the text is its arguments and `tool_name` its name."""

    pieces: tuple[str, ...]
    is_valid: bool
    tool_name: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)


class ShapeCounts:
    """Shaped requests answered and how many validly, since the last `GET /_shapes`; and the count that decides
    the next one (kept across reports, so the share holds over a whole run)."""

    def __init__(self) -> None:
        self.num_seen = self.num_broken = 0
        self.answered = self.valid = 0

    def next_is_valid(self, share: float) -> bool:
        self.num_seen += 1
        is_valid = math.floor(self.num_seen * share + 1e-9) > math.floor((self.num_seen - 1) * share + 1e-9)
        self.answered += 1
        self.valid += is_valid
        self.num_broken += not is_valid
        return is_valid

    def report_and_clear(self) -> dict[str, int]:
        report = {"answered": self.answered, "valid": self.valid}
        self.answered = self.valid = 0
        return report


def asks_for_shape(body: dict[str, Any]) -> bool:
    response_format = body.get("response_format")
    wants_json = isinstance(response_format, dict) and response_format.get("type") in ("json_object", "json_schema")
    return wants_json or bool(body.get("tools"))


def shaped_answer(body: dict[str, Any], counts: ShapeCounts, share: float) -> ShapedAnswer:
    """The answer to a request that asks for a shape (`asks_for_shape`)."""
    is_valid = counts.next_is_valid(share)
    fault = None if is_valid else counts.num_broken % 3
    tools = body.get("tools")
    if tools:
        return _tool_call(tools, body.get("tool_choice"), fault)
    response_format = body["response_format"]
    schema = (response_format.get("json_schema") or {}).get("schema") if response_format["type"] == "json_schema" \
        else None
    value = example(schema) if schema is not None else {"answer": "yes"}
    if fault is None:
        return _answer(orjson.dumps(value).decode(), True)
    broken = _broken(schema, value) if fault == 1 and schema is not None else None
    if broken is not None:
        return _answer(orjson.dumps(broken).decode(), False)
    if fault == 1:  # json_object, or a schema that nothing breaks: a JSON list, not an object
        return _answer("[1, 2]" if schema is None else "not json", False)
    text = orjson.dumps(value).decode()
    return _answer(text[: max(1, len(text) // 2)] if fault == 0 else "not json", False)


def _tool_call(tools: list[Any], choice: Any, fault: int | None) -> ShapedAnswer:
    named = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    function = next((t["function"] for t in tools if t["function"]["name"] == named), tools[0]["function"])
    parameters = function.get("parameters") or {}
    arguments = orjson.dumps(example(parameters)).decode()
    if fault == 0:
        return _answer(arguments, False, f"{function['name']}_not_offered")
    if fault == 1:
        return _answer(arguments[: max(1, len(arguments) // 2)], False, function["name"])
    if fault == 2:
        broken = _broken(parameters, example(parameters))
        return _answer(orjson.dumps(broken).decode() if broken is not None else "{", False, function["name"])
    return _answer(arguments, True, function["name"])


def _answer(text: str, is_valid: bool, tool_name: str | None = None) -> ShapedAnswer:
    pieces = tuple(text[i : i + PIECE_CHARS] for i in range(0, len(text), PIECE_CHARS)) or ("",)
    return ShapedAnswer(pieces, is_valid, tool_name)


def _broken(schema: dict[str, Any], value: Any) -> Any | None:
    """`value` made to break `schema`: a required field dropped, else a field of the wrong type; None if neither."""
    if not isinstance(value, dict):
        return None
    required = schema.get("required") or []
    if required:
        return {key: field for key, field in value.items() if key != required[0]}
    for key, field_schema in (schema.get("properties") or {}).items():
        if field_schema.get("type") in ("string", "integer", "number", "boolean", "array", "object"):
            return {**value, key: None if field_schema["type"] != "string" else 12345}
    return None


def example(schema: dict[str, Any], root: dict[str, Any] | None = None, depth: int = 0) -> Any:
    """A value that matches `schema` (the common keywords: type, properties, items, enum, const, anyOf, oneOf,
    local $ref, length and range bounds)."""
    root = root if root is not None else schema
    if depth > 12:
        return None
    if "$ref" in schema:
        target: Any = root
        for part in str(schema["$ref"]).removeprefix("#/").split("/"):
            target = target.get(part, {}) if part else target
        return example(target, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return example(schema[key][0], root, depth + 1)
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "null") if isinstance(kind, list) else kind
    if kind == "object" or (kind is None and "properties" in schema):
        return {key: example(field, root, depth + 1) for key, field in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [example(schema.get("items") or {}, root, depth + 1)] * max(1, int(schema.get("minItems", 1)))
    if kind == "string":
        return "x" * max(1, int(schema.get("minLength", 1)))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + (1 if "exclusiveMinimum" in schema else 0))
        value = max(1, low) if "maximum" not in schema else min(max(1, low), schema["maximum"])
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return {}
