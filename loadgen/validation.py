"""One way to say what is wrong with a validated file or flag: `field.path: what is wrong; ...`.

Shared by every pydantic-validated input (scenarios, engine files, price catalogs, report settings).
"""

from __future__ import annotations

from pydantic import ValidationError


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
