"""What every reader of another tool's results shares: the level it makes, the error it raises, and a level
summary built from a file's aggregates where the file does not hold each request."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeGuard

from loadgen.arrivals import Level, parse_label
from loadgen.types import Distribution, Latency, LevelSummary, RequestCounts, RequestRecord, Throughput, Tokens


class ImportFileError(ValueError):
    """A file that is not what `--from` says; the message names the file and the field."""


@dataclass(frozen=True)
class ImportedLevel:
    """One level read from a peer's file: its label, and either its requests (to summarize as measured ones) or
    its summary from the file's aggregates; what the file did not give, in `notes`."""

    label: str
    engine: str
    model: str | None
    tool_version: str | None
    records: tuple[RequestRecord, ...] = ()
    summary: LevelSummary | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def relabeled(self, label: str, engine: str | None = None) -> ImportedLevel:
        """The same level as `label` (a repeat: `c8#2`) and, where given, under another engine's name."""
        engine = engine or self.engine
        parsed = parse_label(label)
        records = tuple(replace(r, level=label, engine=engine) for r in self.records)
        summary = self.summary and replace(self.summary, level=label, engine=engine, base_level=parsed.base,
                                           repeat=parsed.repeat)
        return replace(self, label=label, engine=engine, records=records, summary=summary)


def load_json(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in `path`; `what` names the file it should be, for the error."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ImportFileError(f"{path}: not a JSON file ({exc})") from None
    except RecursionError:  # arrays nested deeper than the parser's stack
        raise ImportFileError(f"{path}: not a JSON file (nested too deeply)") from None
    try:  # JSON's \ud800 escapes decode to lone surrogates, which no file this run writes can hold
        json.dumps(raw, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise ImportFileError(f"{path}: not a JSON file of text (a \\u escape names half a character)") from None
    if not isinstance(raw, dict):
        raise ImportFileError(f"{path}: expected a JSON object ({what})")
    return raw


def part(raw: dict[str, Any], name: str) -> dict[str, Any]:
    """The object at `raw[name]`, or an empty one where the file has none there (an optional part)."""
    value = raw.get(name)
    return value if isinstance(value, dict) else {}


def shown(value: Any) -> str:
    """A field's value as an error message quotes it: `missing`, or its repr cut short."""
    return "missing" if value is None else repr(value)[:80]


def is_count(value: Any, minimum: int = 0) -> TypeGuard[int]:
    """A whole number >= minimum (JSON's true is not 1), and no more than a float holds exactly."""
    return isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= 2**53


def is_number(value: Any) -> TypeGuard[int | float]:
    """A finite number (Python's JSON reader takes NaN and Infinity, which no figure is, and whole numbers past
    any float's range)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int of 309 digits and more
        return False


@dataclass(frozen=True)
class Aggregates:
    """A level's figures as a file gives them, where it holds no request of its own."""

    label: str
    kind: str  # concurrency, rate or trace
    target: float
    num_ok: int
    num_failed: int
    duration_s: float
    request_per_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    latency: Latency
    mean_input_tokens: float
    mean_output_tokens: float
    mean_in_flight: float
    goodput_request_per_s: float | None = None


def aggregate_summary(engine: str, figures: Aggregates, notes: list[str]) -> LevelSummary:
    """The level summary of a file's aggregates: the whole run is its window (no steady part is known), and every
    request counts as meeting the SLO until `bench/run/rundir.py` checks the percentiles it is given."""
    f, parsed = figures, parse_label(figures.label)
    total = f.num_ok + f.num_failed
    return LevelSummary(
        engine=engine, level=f.label, kind=f.kind, target=f.target, base_level=parsed.base, repeat=parsed.repeat,
        requests=RequestCounts(num_requests=total, num_ok=f.num_ok, num_failed=f.num_failed,
                               failure_rate=f.num_failed / total if total else 0.0, failures_by_kind={}),
        throughput=Throughput(
            window_s=f.duration_s, is_steady_window=False, request_per_s=f.request_per_s,
            output_tokens_per_s=f.output_tokens_per_s, total_tokens_per_s=f.total_tokens_per_s,
            run_request_per_s=f.request_per_s, run_output_tokens_per_s=f.output_tokens_per_s,
            goodput_request_per_s=f.request_per_s if f.goodput_request_per_s is None else f.goodput_request_per_s,
            slo_attainment=1.0, mean_in_flight=f.mean_in_flight),
        latency=f.latency,
        tokens=Tokens(mean_input_tokens=f.mean_input_tokens, mean_output_tokens=f.mean_output_tokens),
        notes=list(notes),
    )


def latency(ttft: Distribution | None = None, itl: Distribution | None = None, icl: Distribution | None = None,
            tpot: Distribution | None = None, e2e: Distribution | None = None) -> Latency:
    """A Latency of the distributions a file gives; the others empty."""
    empty = Distribution()
    return Latency(ttft_ms=ttft or empty, itl_ms=itl or empty, icl_ms=icl or empty, tpot_ms=tpot or empty,
                   e2e_ms=e2e or empty)


def load_label(kind: str, target: float) -> str:
    """This toolkit's label for a load: c8 for 8 users, r2.5 for 2.5 requests/s, t1 for a trace at its pace."""
    return Level(kind, target).base_label  # type: ignore[arg-type]
