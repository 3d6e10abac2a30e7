"""`bench doctor`'s records: what one check found, the checks to run, and the whole report.

Plain data, no I/O: the checks (`doctor_needed`, `doctor_optional`) make them, `doctor` runs the checks and
`bench/commands/doctor_cmd.py` prints them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

Status = Literal["ok", "missing", "not usable"]
STATUSES: tuple[Status, ...] = ("ok", "missing", "not usable")


@dataclass(frozen=True)
class Finding:
    """One piece of the machine: `detail` says what was found, or why it is missing or not usable; `fix` is the
    line that installs or enables it ("" when it is ok or no line would do)."""

    name: str
    status: Status
    detail: str
    fix: str = ""
    required: bool = False  # the main job (a sweep of the reference engine on the default model) needs it

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Finding {self.name!r}: status {self.status!r}, expected one of {', '.join(STATUSES)}")

    @property
    def is_ok(self) -> bool:
        return self.status == "ok"


Probe = Callable[[], "Finding | list[Finding]"]


@dataclass(frozen=True)
class Check:
    """A probe and the name its failure is reported under (a probe may find several pieces: the engine kinds)."""

    name: str
    probe: Probe
    required: bool = False


@dataclass(frozen=True)
class Report:
    findings: tuple[Finding, ...]

    @property
    def blocking(self) -> Finding | None:
        """The first piece the main job needs that is not ok, if any."""
        return next((f for f in self.findings if f.required and not f.is_ok), None)

    @property
    def can_run_main_job(self) -> bool:
        return self.blocking is None

    def to_json(self) -> dict[str, Any]:
        blocking = self.blocking
        return {"can_run_main_job": blocking is None, "blocked_by": blocking.name if blocking else None,
                "findings": [asdict(f) for f in self.findings]}
