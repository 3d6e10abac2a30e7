"""Mutations of a shipped sample, for the readers' fuzz tests, and the one property they all check.

- structural: over the parsed sample, a place in it (a path of keys and indexes) gets a hostile value (each JSON
  type, huge and negative numbers, NaN, empty, very long and odd unicode strings, nesting deeper than a parser's
  stack), loses its key, has its key renamed (to a number too, for YAML), or its list emptied;
- bytes: over the file's bytes, a cut, a flipped byte, garbage inserted, a span deleted or repeated.

`outcome` is the property: a reader either reads the file, or refuses it with its own error type, naming the
file (and, for a structural mutation, a key on the mutated path). Anything else escapes and fails the test, with
the example hypothesis found. Each test's cases are counted in `CASES` (read / refused), printed at the end.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# derandomize: the same examples on every machine, so CI is reproducible; no example database written to disk.
# FUZZ_SCALE=10 runs ten times the examples, drawn afresh each run (not derandomized): a deeper search by hand.
SCALE = float(os.environ.get("FUZZ_SCALE", "1"))
FUZZ = settings(deadline=None, derandomize=SCALE == 1, database=None, print_blob=SCALE != 1,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def fuzz(max_examples: int) -> settings:
    """A test's settings: `max_examples` cases (times FUZZ_SCALE)."""
    return settings(FUZZ, max_examples=max(1, round(max_examples * SCALE)))

CASES: Counter[tuple[str, str]] = Counter()  # (test, "read" | "refused") -> how many

Place = tuple[str | int, ...]
DEEP_NESTING = 5000  # past Python's default recursion limit (1000): a recursive parser runs out of stack
_DEEP = re.compile(r"\"?DEEPNEST_(\d+)\"?")

ODD_TEXT = ["", " ", "\t\n", "x" * 100_000, "\u202e\u0000\ufeff", "２３", "²", "٣", "1e400", "NaN", "-1", "0x10",
            "../../../etc/passwd", "<script>alert(1)</script>", "[/x]", "{{ 7*7 }}", "\ud800", "é" * 1000,
            "2026-13-45", "inf", "null", "true"]
ODD_NUMBERS = [0, -1, 1, 2**31, 2**63, 2**64, -(2**63) - 1, 10**30, -(10**30), 10**400, 0.0, -0.0, 0.5, 1e308,
               -1e308, 5e-324, float("nan"), float("inf"), float("-inf")]


def _scalars() -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
                     st.sampled_from(ODD_NUMBERS), st.sampled_from(ODD_TEXT))


def hostile_values() -> st.SearchStrategy[Any]:
    """Any JSON value, the odd ones weighted in: containers of scalars, and nesting too deep to parse."""
    scalars = _scalars()
    return st.one_of(
        scalars,
        st.lists(scalars, max_size=4),
        st.dictionaries(st.text(max_size=8), scalars, max_size=4),
        st.sampled_from([[], {}, f"DEEPNEST_{DEEP_NESTING}"]),
        st.integers(min_value=1, max_value=40).map(lambda n: {"a": [{"b": [n]}] * n}),  # nested, valid
    )


def places(value: Any, place: Place = ()) -> list[Place]:
    """Every place in a parsed document, the document itself first."""
    found = [place]
    if isinstance(value, dict):
        for key, item in value.items():
            found += places(item, (*place, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += places(item, (*place, index))
    return found


def _parent_and_key(document: Any, place: Place) -> tuple[Any, str | int]:
    parent = document
    for key in place[:-1]:
        parent = parent[key]
    return parent, place[-1]


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@dataclass(frozen=True)
class Mutation:
    document: Any
    place: Place
    action: str  # replace, drop, rename, empty, none
    names: tuple[str, ...] = ()  # the fields on the mutated path: a refusal caused there names one of them

    def __repr__(self) -> str:  # hypothesis prints it for a failing example; the document may be huge
        return f"Mutation({self.action} at {list(self.place)!r})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # what hypothesis's printer calls
        printer.text(repr(self))


@st.composite
def mutations(draw: st.DrawFn, sample: Any, yaml_keys: bool = False) -> Mutation:
    """The sample with one place changed (or, now and then, none: the sample itself must read)."""
    document = _copy(sample)
    place = draw(st.sampled_from(places(document)))
    action = draw(st.sampled_from(["replace", "replace", "replace", "drop", "rename", "empty", "none"]))
    if action == "none":
        return Mutation(document, (), "none")
    if not place:
        return Mutation(draw(hostile_values()), (), "replace")
    parent, key = _parent_and_key(document, place)
    names = _names(document, place)
    if action == "drop":
        del parent[key]
    elif action == "rename" and isinstance(parent, dict):
        keys = st.one_of(st.text(max_size=10), st.integers(), st.booleans()) if yaml_keys else st.text(max_size=10)
        new_key = draw(keys)
        parent[new_key] = parent.pop(key)
        names = (*names, str(new_key))  # the refusal may name the key that came, not the one that went
    elif action == "empty" and isinstance(parent[key], (list, dict, str)):
        parent[key] = type(parent[key])()
    else:
        action = "replace"
        parent[key] = draw(hostile_values())
    return Mutation(document, place, action, names)


def _names(document: Any, place: Place) -> tuple[str, ...]:
    """The keys on the path, and the name of each {"key": NAME, "value": ...} item it passes (OTLP's attributes)."""
    names = []
    node = document
    for step in place:
        if isinstance(node, dict) and isinstance(node.get("key"), str):
            names.append(node["key"])
        if isinstance(step, str):
            names.append(step)
        node = node[step]
    if isinstance(node, dict) and isinstance(node.get("key"), str):
        names.append(node["key"])
    return tuple(names)


@st.composite
def byte_mutations(draw: st.DrawFn, raw: bytes) -> bytes:
    """The file's bytes cut, flipped, with garbage inserted, a span deleted or repeated."""
    at = draw(st.integers(min_value=0, max_value=len(raw)))
    action = draw(st.sampled_from(["cut", "flip", "insert", "delete", "repeat", "bad-utf8"]))
    if action == "cut":
        return raw[:at]
    if action == "flip" and at < len(raw):
        flip = draw(st.integers(min_value=1, max_value=255))
        return raw[:at] + bytes([raw[at] ^ flip]) + raw[at + 1:]
    if action == "delete":
        return raw[:at] + raw[at + draw(st.integers(min_value=1, max_value=64)):]
    if action == "repeat":
        return raw[:at] + raw[at:at + draw(st.integers(min_value=1, max_value=256))] * 2 + raw[at:]
    if action == "bad-utf8":
        odd = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf"]))
        return raw[:at] + odd + raw[at:]
    return raw[:at] + draw(st.binary(min_size=1, max_size=16)) + raw[at:]


def _deepen(text: str) -> str:
    return _DEEP.sub(lambda m: "[" * int(m.group(1)) + "]" * int(m.group(1)), text)


def to_json(document: Any, indent: int | None = None) -> str:
    """JSON as Python writes it (NaN and Infinity included, which some parsers refuse), deep nesting spliced in."""
    return _deepen(json.dumps(document, indent=indent))


def to_json_lines(rows: list[Any]) -> str:
    return "".join(to_json(row) + "\n" for row in rows)


def to_yaml(document: Any) -> str:
    return _deepen(yaml.safe_dump(document, sort_keys=False, allow_unicode=False, width=1000))


def write(directory: Path, name: str, content: str | bytes, test: str) -> Path:
    """A fresh file for each case of `test` (a new name: no reader's cache takes it for the last one)."""
    CASES[(test, "examples")] += 1
    CASES[("files", "written")] += 1
    path = directory / f"{CASES[('files', 'written')]:06d}-{name}"
    if isinstance(content, str):
        content = content.encode("utf-8", errors="surrogatepass")
    path.write_bytes(content)
    return path


WHOLE_FILE = ("not valid", "not a JSON file", "no session in it", "no request in it", "the file is empty",
              "can't tell its")


def _parse_failure(message: str) -> bool:
    """A file that does not parse has no field to name (the line and column say where), nor one with nothing in it."""
    return any(said in message for said in WHOLE_FILE)


def outcome(test: str, read: Callable[[], Any], errors: type[BaseException] | tuple[type[BaseException], ...],
            file: Path | str, mutation: Mutation | None = None) -> Any:
    """Reads, or checks the refusal: one of `errors`, naming the file and, where a key was mutated and the
    refusal is about it, a name on its path. Returns what was read (None when refused)."""
    try:
        result = read()
    except errors as exc:
        message = str(exc)
        named = str(file), Path(file).name
        assert any(name in message for name in named), f"the refusal does not name the file: {message[:300]}"
        assert "Traceback" not in message
        if mutation is not None and mutation.names and not _parse_failure(message):
            assert any(name in message for name in mutation.names), \
                f"{mutation!r} refused without naming a field on its path: {message[:300]}"
        CASES[(test, "refused")] += 1
        return None
    CASES[(test, "read")] += 1
    return result
