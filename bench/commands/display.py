"""What a person sees while a sweep runs and when it ends (rich): each level's progress, the jobs' lines, a
measuring command's outcome and a run's tables (built in `tables.py`). Display only: nothing here measures."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from bench.commands.console import console as stdout
from bench.commands.console import errors, warn
from bench.commands.tables import (
    adapter_counts_table,
    adapters_table,
    capacity_line,
    quality_table,
    repeats_table,
    replica_view_table,
    server_view_table,
    sessions_table,
    spec_decode_table,
    summary_table,
    ui_overhead_table,
    validity_table,
)
from common.private import describe_access
from loadgen.arrivals import Level, parse_label
from loadgen.repeats import aggregate
from loadgen.runner import LevelBounds
from loadgen.types import LevelSummary, RequestRecord, speculates

if TYPE_CHECKING:
    from bench.flows.measure import Describe, Job, Outcome
    from bench.run.rundir import Run


class RichSweepProgress:
    """One line per level: requests done, failures, output tokens/s so far, elapsed time; after each level,
    what `describe` makes of its summary (a capacity search's verdict on the probe), if anything."""

    def __init__(self, console: Console, describe: Callable[[LevelSummary | None], str | None] | None = None) -> None:
        self.console = console
        self.describe = describe
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
            console=console, refresh_per_second=2, transient=False,
        )
        self.task_id: int | None = None
        self._reset()

    def _reset(self) -> None:
        self.num_done = self.num_failed = self.num_tokens = 0
        self.started = time.perf_counter()

    def __enter__(self) -> RichSweepProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def level_started(self, level: Level, bounds: LevelBounds) -> None:
        self._reset()
        limit = []
        if bounds.duration_s is not None:
            limit.append(f"{bounds.duration_s:g} s")
        if bounds.max_requests is not None:
            limit.append(f"{bounds.max_requests} requests")
        self.label = f"level {level.label} ({' or '.join(limit)})"
        self.task_id = self.progress.add_task(self.label + ": warming up", total=None)

    def request_finished(self, record: RequestRecord) -> None:
        if record.is_warmup or self.task_id is None:
            return
        self.num_done += 1
        self.num_failed += not record.ok
        self.num_tokens += record.output_tokens
        rate = self.num_tokens / max(time.perf_counter() - self.started, 1e-9)
        self.progress.update(self.task_id, description=(
            f"{self.label}: {self.num_done} done, {self.num_failed} failed, {rate:,.0f} output tokens/s"))

    def level_finished(self, summary: LevelSummary | None) -> None:
        if self.task_id is not None:
            self.progress.stop_task(self.task_id)
        line = self.describe(summary) if self.describe else None
        if line:
            self.progress.console.print(line, highlight=False)


class RichJobWatcher:
    """Jobs as they run (bench.flows.measure.JobWatcher): each level's progress line, with what `describe`
    makes of it; plain lines to stdout; an engine that failed while others still run, to stderr."""

    def __init__(self, describe: Callable[[Job], Describe | None] | None = None) -> None:
        self.describe = describe

    def progress(self, job: Job) -> RichSweepProgress:
        return RichSweepProgress(stdout, self.describe(job) if self.describe else None)

    def say(self, line: str) -> None:
        stdout.print(line, markup=False, highlight=False, soft_wrap=True)

    def failed(self, engine: str, reason: str) -> None:
        errors.print(f"[bold red]{escape(engine)} failed:[/] {escape(reason)}", highlight=False, markup=True)


class RichTuneWatcher(RichJobWatcher):
    """A tune as it runs (bench.flows.tune.TuneWatcher): its jobs as a measuring command's, a rule before each
    configuration, and warnings to stderr."""

    def configuration(self, name: str) -> None:
        stdout.rule(name, style="dim")

    def warn(self, line: str) -> None:
        warn(line)


def show_outcome(outcome: Outcome, title: str) -> None:
    """A measuring command's end: what it measured, the reports written, and every failure named."""
    for run_dir in outcome.already_complete:
        stdout.print(f"{run_dir}: complete, nothing to resume", markup=False)
    show_runs([(result.run_dir, result.run) for result in outcome.results if result.run is not None], title,
              where=True)
    if outcome.reports is not None:
        for path in outcome.reports.written:
            stdout.print(f"report: {path}")
        if outcome.reports.comparison is not None:
            stdout.print(f"comparison report: {outcome.reports.comparison}")
        if outcome.reports.problem is not None:
            errors.print(f"[yellow]no report:[/] {escape(outcome.reports.problem)} (run `bench report` with the "
                         "missing options)")
    _show_failures(outcome)


def _show_failures(outcome: Outcome) -> None:
    if outcome.failures and not outcome.results:  # nothing measured at all: said as a bad flag is
        for _, reason in outcome.failures:
            errors.print(f"[bold red]error:[/] {escape(reason)}", highlight=False, markup=True)
        return
    for engine, reason in outcome.failures:
        errors.print(f"[bold red]not measured:[/] {escape(engine)}: {escape(reason)}", highlight=False, markup=True)
    if outcome.failures:
        unfinished = " ".join(f"--resume {r.run_dir}" for r in outcome.results if r.status != "complete")
        errors.print("fix what failed and run it again" + (f" (unfinished: {unfinished})" if unfinished else ""),
                     highlight=False)


def show_runs(runs: Sequence[tuple[Path, Run]], title: str, where: bool = False) -> None:
    """What runs measured, as `bench summarize` and a finished sweep print it: every run's levels together,
    then each run's own views (its server's metrics, adapter counts, replicas, capacity); `where`: each run's
    directory and who may read it (a sweep just made them; `bench summarize` was given it)."""
    summaries = [summary for _, run in runs for summary in run.summaries]
    if summaries:
        stdout.print(summary_table(summaries, title=title))
    if any(s.sessions is not None for s in summaries):
        stdout.print(sessions_table(summaries))
    if any(s.quality is not None for s in summaries):
        stdout.print(quality_table(summaries))
    if any(s.validity is not None for s in summaries):
        stdout.print(validity_table(summaries))
    if any(s.adapters is not None for s in summaries):
        stdout.print(adapters_table(summaries))
    repeated = [r for r in aggregate(summaries) if r.num_repeats > 1]
    if repeated:
        stdout.print(repeats_table(repeated))
    _show_ui_overhead(summaries)
    for run_dir, run in runs:
        _show_run_views(run_dir, run, where)


def _show_run_views(run_dir: Path, run: Run, where: bool) -> None:
    name = run_dir.name
    ui = run.info.engine.details.ui
    if ui is not None and ui.page is not None and ui.page.why_not:
        warn(f"{ui.name}'s page was not checked in a browser: {ui.page.why_not}")
    if run.server_views:
        stdout.print(server_view_table(list(run.server_views), title=f"the server's own metrics: {name}"))
    if speculates(run.summaries, run.server_views):
        stdout.print(spec_decode_table(list(run.summaries), list(run.server_views),
                                       title=f"speculative decoding: {name}"))
    if any(parse_label(s.level).adapters is not None for s in run.summaries):
        stdout.print(adapter_counts_table(list(run.summaries), list(run.server_views)))
    if run.replica_views:
        budgets = {i: r.budget_text for i, r in enumerate(run.info.engine.details.replicas) if r.budget_text}
        stdout.print(replica_view_table(list(run.replica_views), title=f"each replica behind the router: {name}",
                                        budgets=budgets))
    if run.capacity is not None:
        stdout.print(capacity_line(run.capacity, any(s.sessions is not None for s in run.summaries)),
                     highlight=False)
    if where:
        stdout.print(f"run directory: {escape(str(run_dir))}, {describe_access(run_dir)}", highlight=False,
                     soft_wrap=True)


def _show_ui_overhead(summaries: list[LevelSummary]) -> None:
    """Each engine measured direct and through Open WebUI (`--through-ui`): the two side by side."""
    from engines.openwebui import VIA_UI
    from reports.ui_overhead import bottleneck_sentence, pairs_through_ui

    for direct, levels in pairs_through_ui(summaries, VIA_UI).items():
        if levels:
            stdout.print(ui_overhead_table(levels, title=f"{direct}: direct and through Open WebUI"))
            stdout.print(bottleneck_sentence(levels), highlight=False)

