"""A run's summaries kept as its records are written, so a sweep never reads requests.jsonl back.

Every record of a level goes through the run's writer on its way to requests.jsonl (`LevelContext.keep`, and
a split level's drained records too); `TallyingWriter` writes it as ever and `RunTally` adds the measured ones
to the level's columns (`loadgen.columns`, the same columns `rundir.read_run` builds from the file's rows). When the
level ends, its summary is made from those columns and its levels.jsonl line, exactly as `bench summarize`
makes it afterwards, and the columns are let go: a level's bookkeeping costs its own records, not the run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.run.rundir import level_summary
from loadgen.columns import ColumnsBuilder
from loadgen.recorder import JsonlWriter
from loadgen.types import SLO, LevelSummary, RequestRecord


class RunTally:
    """Each finished level's summary, and each unfinished level's measured records as columns."""

    def __init__(self, slo: SLO, kept: Sequence[LevelSummary] = ()) -> None:
        self.slo = slo
        self.summaries: list[LevelSummary] = list(kept)  # the finished levels', in the order they ran
        self._open: dict[str, ColumnsBuilder] = {}  # levels with records and no end yet

    def add(self, record: RequestRecord) -> None:
        if record.is_warmup:  # warm-ups are in no summary
            return
        builder = self._open.get(record.level) or self._open.setdefault(
            record.level, ColumnsBuilder(record.engine, record.level))
        builder.add(lambda name, default: getattr(record, name, default))

    def level_finished(self, level_row: dict[str, Any]) -> LevelSummary | None:
        """The level whose levels.jsonl line is `level_row` ended: its summary (None: it measured nothing)."""
        builder = self._open.pop(level_row["level"], None)
        if builder is None:
            return None
        # The line as levels.jsonl gives it back (a NaN is null there), so the summary is the file's to the byte.
        summary = level_summary(builder.build(), orjson.loads(orjson.dumps(level_row)), self.slo)
        self.summaries.append(summary)
        return summary

    def all_summaries(self) -> list[LevelSummary]:
        """Every level's summary: the finished ones, then any cut short (records, no end) as `read_run` says them."""
        return [*self.summaries, *(level_summary(builder.build(), {}, self.slo) for builder in self._open.values())]


class TallyingWriter(JsonlWriter):
    """requests.jsonl's writer: each record written as ever, and added to the run's tally."""

    def __init__(self, path: Path, tally: RunTally) -> None:
        super().__init__(path)
        self.tally = tally

    def write(self, row: object) -> None:
        super().write(row)
        if isinstance(row, RequestRecord):
            self.tally.add(row)
