"""Run directories as a report sees them: what was measured, what was planned but is missing, and where from.

Reads only files (`reports.results`); every level is re-summarized from its records, so a report always
agrees with `bench summarize`. An interrupted sweep is reported as far as it got, with what is missing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from common.validation import validate
from costmodel.inputs import DecisionSettings
from loadgen.metrics import SLO, LevelSummary
from reports.results import RunDirError, read_level_runs, read_run_json, summarize_run


class ReportError(Exception):
    """Nothing to report, or a setting the report cannot use; the message says which and what to do."""


@dataclass(frozen=True)
class RunReport:
    run_dir: Path
    label: str
    run: dict[str, Any]
    summaries: tuple[LevelSummary, ...]
    kind: str
    missing: tuple[str, ...]
    cut_short: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def status(self) -> str:
        return str(self.run.get("status", "unknown"))

    @property
    def measured(self) -> tuple[LevelSummary, ...]:
        """The levels the cost model uses: one kind only (closed loop when there is any)."""
        return tuple(s for s in self.summaries if s.kind == self.kind)


def load_runs(run_dirs: Sequence[Path], slo: SLO | None = None) -> tuple[list[RunReport], list[str]]:
    """Every run directory that has measurements, and a line for each one skipped (and why)."""
    runs, skipped = [], []
    for run_dir in run_dirs:
        if not Path(run_dir).is_dir():
            raise ReportError(f"{run_dir}: no such directory (expected a run directory written by `bench sweep`)")
        try:
            runs.append(_load_run(Path(run_dir), slo))
        except RunDirError as exc:
            skipped.append(str(exc))
    if not runs:
        raise ReportError("nothing to report: " + ("; ".join(skipped) or "no run directory given"))
    return _unique_labels(runs), skipped


def _load_run(run_dir: Path, slo: SLO | None) -> RunReport:
    run = read_run_json(run_dir)
    summaries = tuple(summarize_run(run_dir, slo))
    if not summaries:
        raise RunDirError(f"{run_dir}: no measured request yet (status: {run.get('status', 'unknown')})")
    kinds = Counter(s.kind for s in summaries)
    kind = "concurrency" if kinds["concurrency"] else "rate"
    planned = [str(label) for label in run.get("levels", [])]
    measured = {s.level for s in summaries}
    finished = set(read_level_runs(run_dir))
    missing = tuple(label for label in planned if label not in measured)
    cut_short = tuple(s.level for s in summaries if s.level not in finished)
    notes = []
    status = str(run.get("status", "unknown"))
    if status != "complete":
        notes.append(f"the sweep did not complete (status: {status})")
    if missing:
        notes.append(f"planned but never measured: {', '.join(missing)}")
    if cut_short:
        notes.append(f"cut short before its end: {', '.join(cut_short)} (figures from the requests that finished)")
    if len(kinds) > 1:
        notes.append(f"the cost model uses the {kind} levels only; the others are shown in the tables")
    return RunReport(run_dir, _engine_label(run), run, summaries, kind, missing, cut_short, tuple(notes))


def _engine_label(run: dict[str, Any]) -> str:
    engine = run.get("engine") or {}
    name = str(engine.get("name") or "engine")
    version = engine.get("version")
    return f"{name} {version}" if version else name


def _unique_labels(runs: list[RunReport]) -> list[RunReport]:
    counts = Counter(r.label for r in runs)
    return [r if counts[r.label] == 1 else RunReport(r.run_dir, f"{r.label} ({r.run_dir.name})", r.run,
                                                      r.summaries, r.kind, r.missing, r.cut_short, r.notes)
            for r in runs]


def settings_from_run(run_dir: Path) -> DecisionSettings:
    """The decision settings of the scenario a run was measured with (as recorded in its run.json)."""
    scenario = read_run_json(run_dir).get("scenario") or {}
    raw = {key: scenario[key] for key in ("slo", "traffic", "pricing", "requirements") if key in scenario}
    return parse_settings(raw, f"{run_dir / 'run.json'} scenario")


def parse_settings(raw: dict[str, Any], origin: str) -> DecisionSettings:
    return validate(DecisionSettings, raw, origin, ReportError)


def model_json(model: BaseModel | None) -> dict[str, Any] | None:
    return None if model is None else model.model_dump(mode="json")
