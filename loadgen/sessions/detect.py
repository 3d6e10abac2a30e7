"""Whether a file (or a directory) holds agent sessions, and in which format, from its first object only.

Apart from the readers (`loadgen.sessions.formats`) so a workload's settings can ask without importing them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

SESSION_FORMATS = ("weka", "tracelab", "otel")


def detect_session_format(path: Path, text: str) -> str | None:
    """weka, tracelab or otel from the first object; None when it is none of them."""
    head = text.lstrip()
    try:
        first: Any = orjson.loads(head)
    except orjson.JSONDecodeError:
        try:
            first = orjson.loads(head.splitlines()[0]) if head else None
        except orjson.JSONDecodeError:
            return None
    if isinstance(first, list) and first:
        first = first[0]
    if not isinstance(first, dict):
        return None
    if "requests" in first and ("block_size" in first or "id" in first):
        return "weka"
    if "session_id" in first and "round_index" in first:
        return "tracelab"
    if {"resourceSpans", "resource_spans", "traceId", "trace_id"} & first.keys():
        return "otel"
    return None


def is_session_path(path: str | Path) -> bool:
    """Whether `--dataset` names a session dataset, from a directory's first file or a file's head."""
    path = Path(path)
    if path.is_dir():
        first = next(iter(sorted(p for p in path.iterdir() if p.suffix == ".json")), None)
        return first is not None and detect_session_format(first, first.read_text(errors="replace")) is not None
    if not path.is_file():
        return False
    with path.open("rb") as file:
        head = file.read(1 << 20).decode("utf-8-sig", errors="replace")
    return detect_session_format(path, head) is not None
