"""What a flag's text holds: `KEY=VALUE`, comma-separated values, and which flags a command was given (as the
--names a person typed). These only split and compare; each caller says what it accepts, naming the flag, in
its own error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple


class KeyValue(NamedTuple):
    key: str  # stripped; "" when the text starts with "="
    value: str | None  # stripped; None when the text has no "="


def key_value(text: str) -> KeyValue:
    """`KEY=VALUE` -> its key and value, split at the first "=": `a = b=c` -> ("a", "b=c"); `a` -> ("a", None)."""
    key, sep, value = text.partition("=")
    return KeyValue(key.strip(), value.strip() if sep else None)


def listed(*texts: str | None) -> list[str]:
    """The comma-separated values of one flag's text (or of several, in turn), each stripped, empty ones left out:
    `"a, b,,c"` -> ["a", "b", "c"]; None -> []."""
    return [part.strip() for text in texts for part in (text or "").split(",") if part.strip()]


def flag_name(name: str) -> str:
    """A parameter's name as its flag: `max_concurrency` -> `--max-concurrency`."""
    return f"--{name.replace('_', '-')}"


def given_flags(values: Mapping[str, tuple[object, object]]) -> list[str]:
    """The flags given a value other than their default (an empty list is none), as --names, in the order of
    `values` (name -> (value, default))."""
    return [flag_name(name) for name, (value, default) in values.items() if value not in (default, [])]
