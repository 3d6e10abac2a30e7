"""A level's records as columns: a few numbers per request, and every chunk's time and token count in two
flat arrays, so a summary needs 12 bytes per streamed chunk and a few hundred per request instead of a
Python object per value (a one-hour level of a million requests fits in memory).

Built from `RequestRecord`s or straight from the rows of requests.jsonl (no record objects); warm-up
requests are left out, as every summary leaves them out. A value a record does not have is NaN for a time
and -1 for a count, and the record's order is kept everywhere, so sums and percentiles come out exactly as
they do from the records.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.types import STRUCTURE_FAULTS, RequestRecord

NONE = -1  # a count the record does not have
NAN = float("nan")  # a time the record does not have
TIMES = ("send_s", "end_s", "scheduled_s", "dispatch_s", "first_visible_s", "first_send_s", "connect_ms")
COUNTS = ("user", "worker", "turn", "prompt_tokens", "output_tokens", "cached_tokens", "server_output_tokens",
          "max_tokens", "reasoning_tokens", "attempts", "throttled_attempts", "step", "session_requests",
          "implied_cached_tokens", "correct", "draft_tokens", "accepted_draft_tokens", "structure_valid")
DEFAULTS = {"output_tokens": 0, "attempts": 1, "throttled_attempts": 0}  # RequestRecord's, for a row without them


@dataclass(frozen=True)
class LevelColumns:
    """The measured requests of one level of one engine."""

    engine: str
    level: str
    times: dict[str, np.ndarray]  # TIMES, float64, NaN where None
    counts: dict[str, np.ndarray]  # COUNTS, int64, NONE where None
    ok: np.ndarray  # bool
    throttled_error: np.ndarray  # bool: the request failed as throttled
    chunk_start: np.ndarray  # int64, len n + 1: request i's chunks are [chunk_start[i], chunk_start[i + 1])
    chunk_times_s: np.ndarray  # float64, relative to each request's send_s
    chunk_tokens: np.ndarray  # int32
    failures_by_kind: dict[str, int]
    token_count_sources: dict[str, int]  # of the ok requests
    # Agent sessions: each request's session (an index into session_ids; NONE outside any) and whether it is
    # a subagent's call.
    session: np.ndarray | None = None
    session_ids: tuple[str, ...] = ()
    is_subagent: np.ndarray | None = None
    # LoRA adapters: each request's adapter (an index into adapter_names; NONE: the base model); None when no
    # request asked for one
    adapter: np.ndarray | None = None
    adapter_names: tuple[str, ...] = ()
    structure_faults: dict[str, int] | None = None  # shaped answers judged invalid, by fault

    def __len__(self) -> int:
        return len(self.ok)

    @property
    def num_chunks(self) -> np.ndarray:
        return np.diff(self.chunk_start)


class ColumnsBuilder:
    """Columns grown one request at a time (compact arrays as they grow, nothing else kept)."""

    def __init__(self, engine: str, level: str) -> None:
        self.engine, self.level = engine, level
        self.times = {name: array("d") for name in TIMES}
        self.counts = {name: array("q") for name in COUNTS}
        self.ok, self.throttled_error = array("b"), array("b")
        self.chunk_start, self.chunk_times, self.chunk_tokens = array("q", [0]), array("d"), array("i")
        self.failures: Counter[str] = Counter()
        self.sources: Counter[str] = Counter()
        self._times = list(self.times.items())
        self._counts = [(name, DEFAULTS.get(name), column) for name, column in self.counts.items()]
        self.session, self.is_subagent = array("q"), array("b")
        self.session_index: dict[str, int] = {}
        self.adapter = array("q")
        self.adapter_index: dict[str, int] = {}
        self.structure_faults: Counter[str] = Counter()

    def add(self, get: Callable[[str, Any], Any]) -> None:
        """One request, its fields read with `get(name, default)` (a row's `.get`, or a record's getattr).
        The hot loop of reading a long level: plain loops over prepared pairs, no lookups."""
        for name, column in self._times:
            value = get(name, None)
            column.append(NAN if value is None else value)
        for name, default, column in self._counts:
            value = get(name, default)
            column.append(NONE if value is None else value)
        ok = bool(get("ok", False))
        error_kind = get("error_kind", None)
        self.ok.append(ok)
        self.throttled_error.append(error_kind == "throttled")
        if ok:
            self.sources[get("token_count_source", "chunks")] += 1
        else:
            self.failures[error_kind or "unknown"] += 1
        self.chunk_times.extend(get("chunk_times_s", None) or ())
        self.chunk_tokens.extend(get("chunk_tokens", None) or ())
        self.chunk_start.append(len(self.chunk_times))
        session_id = get("session_id", None)
        if session_id is None:
            self.session.append(NONE)
            self.is_subagent.append(False)
        else:
            self.session.append(self.session_index.setdefault(session_id, len(self.session_index)))
            self.is_subagent.append(get("agent", "main") != "main")
        fault = get("structure_fault", None)
        if fault is not None:  # a file's word, counted only when it is one of ours
            self.structure_faults[fault if fault in STRUCTURE_FAULTS else "other"] += 1
        adapter = get("adapter", None)
        index = NONE if adapter is None else self.adapter_index.setdefault(adapter, len(self.adapter_index))
        self.adapter.append(index)

    def build(self) -> LevelColumns:
        return LevelColumns(
            self.engine, self.level, {k: np.frombuffer(v, dtype=np.float64) for k, v in self.times.items()},
            {k: np.frombuffer(v, dtype=np.int64) for k, v in self.counts.items()},
            np.frombuffer(self.ok, dtype=np.int8).astype(bool), np.frombuffer(self.throttled_error, dtype=np.int8)
            .astype(bool), np.frombuffer(self.chunk_start, dtype=np.int64),
            np.frombuffer(self.chunk_times, dtype=np.float64), np.frombuffer(self.chunk_tokens, dtype=np.int32),
            dict(self.failures), dict(self.sources),
            np.frombuffer(self.session, dtype=np.int64) if self.session_index else None, tuple(self.session_index),
            np.frombuffer(self.is_subagent, dtype=np.int8).astype(bool) if self.session_index else None,
            np.frombuffer(self.adapter, dtype=np.int64) if self.adapter_index else None, tuple(self.adapter_index),
            dict(self.structure_faults))


def columns_of(records: Iterable[RequestRecord]) -> LevelColumns | None:
    """The measured (non-warm-up) records of one level as columns; None when there are none."""
    builder = None
    for record in records:
        if record.is_warmup:
            continue
        builder = builder or ColumnsBuilder(record.engine, record.level)
        builder.add(lambda name, default, r=record: getattr(r, name, default))
    return builder.build() if builder else None


def columns_by_level(rows: Iterable[dict[str, Any]]) -> dict[str, LevelColumns]:
    """requests.jsonl's rows, each level's measured requests as columns, in the order the levels first appear."""
    builders: dict[str, ColumnsBuilder] = {}
    for row in rows:
        if row.get("is_warmup"):
            continue
        level = row["level"]
        builder = builders.get(level) or builders.setdefault(level, ColumnsBuilder(row["engine"], level))
        builder.add(row.get)
    return {level: builder.build() for level, builder in builders.items()}
