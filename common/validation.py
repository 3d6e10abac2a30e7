"""Validated input from YAML: one way to parse it and one way to say what is wrong with it.

    describe_validation_error(exc)   -> "field.path: what is wrong; other.field: ..."
    parse_yaml_mapping(text, origin, error, expected) -> the mapping, or `error` naming the file
    validate(model, raw, origin, error)               -> the pydantic model, or `error` naming file and field

Shared by every pydantic-validated input: scenarios, engine files, price catalogs, report settings. Each
caller passes the exception its users see (ScenarioError, PriceError, ...), so messages read the same.
"""

from __future__ import annotations

from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)


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


def parse_yaml_mapping(text: str, origin: str, error: type[Exception], expected: str) -> dict[str, Any]:
    """The YAML mapping in `text`; `error("<origin>: ...")` when it is not valid YAML or not a mapping."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{origin}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise error(f"{origin}: expected {expected}")
    return raw


def validate(model: type[Model], raw: Any, origin: str, error: type[Exception]) -> Model:
    """`model` validated from `raw`; `error("<origin>: field: problem; ...")` when it is not."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise error(f"{origin}: {describe_validation_error(exc)}") from None
