"""Where the SLO stops holding: the capacity search, as a pure state machine over probe results.

    search = CapacitySearch(SearchSettings(kind="concurrency"))
    while (load := search.next_load()) is not None:
        search.record(probe_at(load))          # a full level, judged against the SLO
    result = search.result()

Ramp geometrically from the start load until a probe fails or the server saturates (throughput gains under
5 % for a doubling while latency rises); then narrow the gap between the highest passing and the lowest
failing load until they are within the tolerance (never finer than one user). Each narrowing step aims
where the SLO's worst margin is interpolated to reach its limit, or at the midpoint when that cannot be
told (a secant step with the Illinois rule, so it cannot stall next to one end). A probe where the client
fell behind is neither a pass nor a fail: it is run again once, then the search stops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from bench.run.capacity_record import RATE_STEP, SearchSettings

Verdict = Literal["pass", "fail", "invalid"]
NARROW_MARGIN = 0.1  # a narrowing probe stays this share of the gap away from either end
CLOSE_MARGIN = 0.1  # a secant step may land by an end only when that end's margin is this close to the limit


@dataclass(frozen=True)
class Probe:
    """One probe's outcome. `margin` is the SLO's worst ratio of measured to allowed (<= 1 passes), None
    when nothing measurable decided it; `latency_ms` the median end-to-end latency, for saturation."""

    load: float
    verdict: Verdict
    reasons: tuple[str, ...] = ()
    output_tokens_per_s: float = 0.0
    margin: float | None = None
    latency_ms: float | None = None


@dataclass(frozen=True)
class SearchResult:
    capacity: float | None  # the highest load that passed below the lowest failing one
    lowest_failing: float | None
    saturated: bool
    stopped_because: str
    probes: tuple[Probe, ...]

    @property
    def num_probes(self) -> int:
        return len(self.probes)


@dataclass
class CapacitySearch:
    settings: SearchSettings
    probes: list[Probe] = field(default_factory=list)
    stopped_because: str | None = None
    saturated: bool = False
    _moved: list[str] = field(default_factory=list)  # which end each narrowing step moved: "lo" / "hi"
    _gaps: list[float] = field(default_factory=list)  # the bracket's width before each narrowing step, and after

    def record(self, probe: Probe) -> None:
        bracket = self._bracket()
        self.probes.append(probe)
        if bracket[0] is not None and bracket[1] is not None and probe.verdict != "invalid":  # a narrowing step
            self._moved.append("lo" if probe.verdict == "pass" else "hi")
            lo, hi = self._bracket()
            if not self._gaps:
                self._gaps.append(bracket[1].load - bracket[0].load)
            if lo is not None and hi is not None:
                self._gaps.append(hi.load - lo.load)

    def next_load(self) -> float | None:
        """The load to probe next, or None when the search is over (then `result()` says why)."""
        if self.stopped_because is None:
            self.stopped_because = self._reason_to_stop()
        if self.stopped_because is not None:
            return None
        last = self.probes[-1] if self.probes else None
        if last is not None and last.verdict == "invalid":
            return last.load  # once: a second invalid probe at this load stops the search
        lo, hi = self._bracket()
        if lo is None:
            return self.settings.start
        if hi is None:
            return self._ramp(lo)
        return self._narrow(lo, hi)

    def result(self) -> SearchResult:
        lo, hi = self._bracket()
        return SearchResult(lo.load if lo else None, hi.load if hi else None, self.saturated,
                            self.stopped_because or "still searching", tuple(self.probes))

    # --- the rules --------------------------------------------------------------------------------------

    def _reason_to_stop(self) -> str | None:
        s = self.settings
        valid = [p for p in self.probes if p.verdict != "invalid"]
        if len(self.probes) >= 2 and self.probes[-1].verdict == self.probes[-2].verdict == "invalid" and \
                self.probes[-1].load == self.probes[-2].load:
            return (f"the client fell behind twice at {_load(s, self.probes[-1].load)}: the load generator, not the "
                    "server, limits this probe (see the level's note); the answer stops below it")
        if len(self.probes) >= s.max_probes:
            return f"reached --max-probes {s.max_probes}"
        if not valid:
            return None
        lo, hi = self._bracket()
        if lo is None and hi is not None:
            return (f"the SLO fails at the start load {_load(s, hi.load)} ({'; '.join(hi.reasons)}): lower --start, "
                    "or relax the SLO")
        if lo is not None and hi is None:
            if s.max_load is not None and lo.load >= s.max_load:
                return f"the SLO held up to --max-load {_load(s, s.max_load)}"
            if self._saturated(valid):
                self.saturated = True
                return (f"the server saturated at about {lo.output_tokens_per_s:,.0f} output tokens/s before the SLO "
                        "failed: more load adds latency, not throughput")
        if lo is not None and hi is not None and hi.load - lo.load <= max(s.tolerance * lo.load, s.min_step) + 1e-9:
            return f"the highest passing and lowest failing loads are within {s.tolerance:.0%}"
        return None

    def _bracket(self) -> tuple[Probe | None, Probe | None]:
        """(highest passing probe below the lowest failing one, lowest failing probe)."""
        valid = [p for p in self.probes if p.verdict != "invalid"]
        failing = [p for p in valid if p.verdict == "fail"]
        hi = min(failing, key=lambda p: p.load) if failing else None
        passing = [p for p in valid if p.verdict == "pass" and (hi is None or p.load < hi.load)]
        lo = max(passing, key=lambda p: p.load) if passing else None
        return lo, hi

    def _saturated(self, valid: list[Probe]) -> bool:
        """The last ramp step (a doubling) added under `saturation_gain` throughput while latency rose."""
        passing = [p for p in valid if p.verdict == "pass"]
        if len(passing) < 2:
            return False
        before, after = passing[-2], passing[-1]
        gained = after.output_tokens_per_s < (1 + self.settings.saturation_gain) * before.output_tokens_per_s
        slower = before.latency_ms is not None and after.latency_ms is not None and after.latency_ms > before.latency_ms
        return gained and slower

    def _ramp(self, lo: Probe) -> float:
        s = self.settings
        load = self._rounded(lo.load * s.factor)
        if s.kind == "concurrency":
            load = max(load, lo.load + 1)
        return min(load, s.max_load) if s.max_load is not None else load

    def _narrow(self, lo: Probe, hi: Probe) -> float:
        """Where the worst margin, taken as linear in load, reaches 1 (regula falsi); when one end has moved
        n >= 2 times running, the other end's pull is halved n - 1 times (the Illinois rule), so a margin
        that bends near the limit cannot pin the aim to one end. Kept off both ends by a tenth of the gap;
        the midpoint when the margins say nothing (a failure with no latency to it). Guarded as Brent's method
        is: the midpoint, too, when the aim falls in the quarter of the bracket nearest the end whose margin
        is further from the limit; or in either outer quarter, unless the end it lands by is itself within
        CLOSE_MARGIN of the limit and the last step shrank the bracket by at least half (a wall, latency flat
        below it and a queue past it, pulls a secant to the passing end again and again)."""
        gap = hi.load - lo.load
        aim = lo.load + gap / 2
        if lo.margin is not None and hi.margin is not None and hi.margin > lo.margin:
            below, above = lo.margin - 1, hi.margin - 1  # < 0 and > 0
            run = _run_length(self._moved)
            if run >= 2 and self._moved[-1] == "lo":
                above /= 2 ** (run - 1)
            elif run >= 2:
                below /= 2 ** (run - 1)
            secant = lo.load - below / (above - below) * gap
            worse_is_hi = abs(hi.margin - 1) > abs(lo.margin - 1)
            by_the_worse_end = secant > hi.load - gap / 4 if worse_is_hi else secant < lo.load + gap / 4
            by_an_end = not lo.load + gap / 4 <= secant <= hi.load - gap / 4
            near = lo if secant < lo.load + gap / 2 else hi
            trusted = abs(near.margin - 1) <= CLOSE_MARGIN  # the end it lands by is itself close to the limit
            if not (by_the_worse_end or (by_an_end and (self._slow_to_shrink() or not trusted))):
                aim = min(max(secant, lo.load + NARROW_MARGIN * gap), hi.load - NARROW_MARGIN * gap)
        step = self.settings.min_step
        return min(max(self._rounded(aim), lo.load + step), hi.load - step)

    def _slow_to_shrink(self) -> bool:
        """The last narrowing step left more than half of the bracket it was given."""
        gaps = self._gaps
        return len(gaps) >= 2 and gaps[-1] > gaps[-2] / 2

    def _rounded(self, load: float) -> float:
        if self.settings.kind == "concurrency":
            return float(math.floor(load + 1e-9))
        return round(load / RATE_STEP) * RATE_STEP


def _run_length(moves: list[str]) -> int:
    """How many of the last moves were the same as the last one."""
    run = 0
    for move in reversed(moves):
        if move != moves[-1]:
            break
        run += 1
    return run


def _load(settings: SearchSettings, load: float) -> str:
    return f"{load:g} users" if settings.kind == "concurrency" else f"{load:g} requests/s"
