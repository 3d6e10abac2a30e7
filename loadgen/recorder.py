"""Records on disk: one JSON line per finished request, appended and flushed as it finishes, so a run
that dies keeps everything measured before it died."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from loadgen.types import RequestRecord


class JsonlWriter:
    """Appends JSON lines to a file, flushing each one to the OS."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] = path.open("ab")

    def write(self, row: object) -> None:
        self._file.write(orjson.dumps(row) + b"\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a JSON-lines file. A last line cut short by a crash is skipped, not fatal."""
    with path.open("rb") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                if line.endswith(b"\n"):
                    raise ValueError(f"{path}: malformed JSON line: {line[:80]!r}") from None


def read_records(path: Path) -> list[RequestRecord]:
    return [RequestRecord.from_json(row) for row in read_jsonl(path)]
