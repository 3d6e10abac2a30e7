"""Validated input from YAML: one way to parse it and one way to say what is wrong with it.

    describe_validation_error(exc)   -> "field.path: what is wrong; other.field: ..."
    read_text(path, error)                            -> the file's text, or `error` naming it (not UTF-8)
    parse_yaml_mapping(text, origin, error, expected) -> the mapping, or `error` naming the file
    validate(model, raw, origin, error)               -> the pydantic model, or `error` naming file and field

Shared by every pydantic-validated input: scenarios, engine files, price catalogs, report settings. Each
caller passes the exception its users see (ScenarioError, PriceError, ...), so messages read the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)
# libyaml's parser where PyYAML has it: PyYAML's own takes seconds on a few KB of nested brackets (quadratic in
# the depth, then out of stack), libyaml refuses them past its nesting limit at once.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_YAML_VALUES = 100_000  # a price catalog holds a few thousand


def describe_validation_error(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"] if not str(part).startswith("function-"))
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        else:
            message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems)


def read_text(path: Path, error: type[Exception]) -> str:
    """The file's text; `error("<path>: ...")` when it is not UTF-8 (a binary file given by mistake)."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start}: {raw[exc.start:exc.start + 1]!r})") from None


def parse_yaml_mapping(text: str, origin: str, error: type[Exception], expected: str) -> dict[str, Any]:
    """The YAML mapping in `text`; `error("<origin>: ...")` when it is not valid YAML or not a mapping."""
    try:
        raw = yaml.load(text, Loader=_LOADER)  # noqa: S506 (a safe loader: plain data, no Python objects)
    except yaml.YAMLError as exc:
        raise error(f"{origin}: not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:  # flow collections nested deeper than the parser's stack
        raise error(f"{origin}: not valid YAML: nested too deeply") from None
    if not isinstance(raw, dict):
        raise error(f"{origin}: expected {expected}")
    problem = _tree_problem(raw)
    if problem is not None:
        raise error(f"{origin}: {problem}")
    return raw


def _tree_problem(document: dict[str, Any]) -> str | None:
    """What makes a parsed document no input: more than MAX_YAML_VALUES values once its aliases are expanded (a
    "billion laughs" of a few hundred bytes that every reader after would walk), or a key that is not text
    (YAML reads `1:`, `true:` and `null:` as keys of those types, and no field is named so)."""
    stack: list[tuple[str, Any]] = [("", document)]
    count = 0
    while stack:
        where, value = stack.pop()
        count += 1
        if count > MAX_YAML_VALUES:
            return f"more than {MAX_YAML_VALUES:,} values once its aliases (*name) are expanded; write them out"
        if isinstance(value, dict):
            for key, item in value.items():
                at = f"{where}.{key}" if where else str(key)
                if not isinstance(key, str):
                    return f"{at}: a key that is not text (quote it, or name a field)"
                stack.append((at, item))
        elif isinstance(value, list):
            stack += [(f"{where}[{index}]", item) for index, item in enumerate(value)]
    return None


def validate(model: type[Model], raw: Any, origin: str, error: type[Exception]) -> Model:
    """`model` validated from `raw`; `error("<origin>: field: problem; ...")` when it is not."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise error(f"{origin}: {describe_validation_error(exc)}") from None
