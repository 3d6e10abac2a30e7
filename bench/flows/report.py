"""The flow of a report: run directories -> summaries -> the cost model's inputs -> decide -> the report's files.

    render_report(run_dirs, out, settings=..., prices=...)   what `bench report` calls
    render_run_report(run_dir)                              what a sweep calls when it ends

Each run directory is read once (`rundir.read_run`: every level re-summarized from its records, so a report
always agrees with `bench summarize`); the decision is made from those runs, and then each run's part of the
report (`report_run`) in one pass. An interrupted sweep is reported as far as it got, with what is missing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import date, datetime, timezone
from pathlib import Path

from bench.flows.costinputs import (
    latency_limits,
    measured_cache_hit_rate,
    measured_levels,
    power_per_gpu,
    repeated_level,
    task_level,
    token_usage,
    with_power,
)
from bench.flows.report_plan import memory_plan
from bench.flows.tune_ranking import which_ran_on_what
from bench.inputs.rules import first_line
from bench.inputs.scenario import DecisionSettings, Scenario
from bench.run import rundir
from bench.run.rundir import Run
from bench.run.runinfo import RunInfo
from common.accuracy import Accuracy, Validity
from costmodel.bill import level_bill
from costmodel.curve import monthly_cost_curve
from costmodel.decide import decide
from costmodel.finetunes import decide_finetunes
from costmodel.inputs import Traffic
from costmodel.prices import PriceCatalog, load_catalog
from costmodel.tasks import decide_tasks
from costmodel.types import Decision, EngineLevels, LevelBill, MeasuredLevel, MeasuredOn, TaskDecision, TaskTokens
from engines.openwebui import VIA_UI
from loadgen.adapters import adapter_counts
from loadgen.arrivals import parse_label
from loadgen.quality.figures import accuracy, validity
from loadgen.types import SLO, LevelSummary, ServerView, SessionLane, SessionTokens
from reports.inputs import GpuReading, ReportInput, ReportRun, RunProvenance, ThroughUi, UiPageSeen
from reports.render import REPORT_NAME, ReportFiles, write_report
from reports.ui_overhead import UiLevel, pairs_through_ui


class ReportError(Exception):
    """A setting the report cannot use, or a directory that is not a run; the message says which and what
    to do."""


class NothingToReport(ReportError):
    """None of the run directories given has a measured request."""


@dataclass(frozen=True)
class Report:
    files: ReportFiles
    decision: Decision


def render_report(run_dirs: Sequence[Path | Run], out: Path | None = None, *, settings: DecisionSettings | None = None,
                  prices: Sequence[Path] = (), today: date | None = None, notes: Sequence[str] = ()) -> Report:
    """Write the report for `run_dirs` (a run already read, such as a sweep's own, is not read again). `settings`
    default to the scenario recorded in the first run; `notes` are said of every run (how it was chosen, e.g. by
    `bench tune`).

    Raises ReportError (NothingToReport when nothing was measured) or costmodel.prices.PriceError (a bad
    price file or name); both carry a message meant for the user."""
    if not run_dirs:
        raise ReportError("give at least one run directory")
    if settings is None:
        first = run_dirs[0]
        settings = (_settings_of(first.info.scenario) if isinstance(first, Run) else settings_from_run(Path(first))
                    if (Path(first) / rundir.RUN_FILE).is_file() else DecisionSettings())
    runs, skipped = read_runs(run_dirs, settings.slo)
    run_dirs = [run.run_dir if isinstance(run, Run) else Path(run) for run in run_dirs]
    labels = _unique_labels(runs)
    catalog = load_catalog(prices)
    traffic, cache_hit_source = _cache_hit_rate(settings.traffic, runs)
    engines = [EngineLevels(label, with_power(measured_levels(_measured(run)), run.gpu_views), _capacity_level(run),
                            run_accuracy(run), run.precision, measured_on(run), validity=run_validity(run))
               for run, label in zip(runs, labels, strict=True)]
    decision = decide(engines, latency_limits(settings.slo), traffic, settings.pricing,
                      settings.requirements, catalog, today or date.today())
    tasks = task_decision(runs, labels, settings, catalog, today or date.today())
    adapters = num_adapters(runs)
    finetunes = decide_finetunes(decision, adapters, catalog.finetunes) if adapters else None
    through_ui = _through_ui(runs)
    report_runs = tuple(report_run(run, label, decision, catalog, through_ui, notes, tasks)
                        for run, label in zip(runs, labels, strict=True))
    report_input = ReportInput(
        decision=decision, runs=report_runs, cost_curve=monthly_cost_curve(decision),
        settings=settings.model_dump(mode="json"), price_origins=catalog.origins,
        generated_at=datetime.now(timezone.utc), skipped=tuple(skipped), cache_hit_source=cache_hit_source,
        tasks=tasks, finetunes=finetunes)
    out = Path(out) if out is not None else (run_dirs[0] / REPORT_NAME if len(run_dirs) == 1 else Path(REPORT_NAME))
    return Report(write_report(report_input, out), decision)


def run_accuracy(run: Run) -> Accuracy | None:
    """A run's accuracy on its eval: quality.json's (`bench quality`), else its graded levels' pooled."""
    written = run.quality
    if written is not None and written.get("n"):
        return Accuracy(written["accuracy"], written["low"], written["high"], written["n"])
    graded = [s.quality for s in run.summaries if s.quality is not None]
    if not graded:
        return None
    return accuracy(round(sum(q.accuracy * q.n for q in graded)), sum(q.n for q in graded))


def run_validity(run: Run) -> Validity | None:
    """A run's shaped answers judged, pooled over its levels (each level's own is in its summary)."""
    judged = [s.validity for s in run.summaries if s.validity is not None]
    if not judged:
        return None
    faults: Counter[str] = Counter()
    for level in judged:
        faults.update(level.faults)
    return validity(round(sum(v.valid * v.n for v in judged)), sum(v.n for v in judged), dict(faults))


def measured_on(run: Run) -> MeasuredOn | None:
    """The model and GPUs an engine launched here ran on, as its run.json records them; None for an endpoint the
    user ran (its run does not know what serves it)."""
    engine, gpus = run.info.engine, run.info.gpu_names
    if engine.launched_by == "user":
        return None
    return MeasuredOn(model=engine.model or "", gpu_names=None if gpus is None else tuple(gpus))


def render_run_report(run_dir: Path | Run) -> Path | None:
    """The report of one finished (or interrupted) sweep, next to its records: `<run_dir>/report.html`.

    None when the run measured nothing. Raises ReportError / PriceError when the scenario's pricing can't
    be used (e.g. no GPU named); a sweep should print that message and carry on."""
    try:
        folder = run_dir.run_dir if isinstance(run_dir, Run) else Path(run_dir)
        return render_report([run_dir if isinstance(run_dir, Run) else folder], folder / REPORT_NAME).files.html
    except NothingToReport:
        return None


def _through_ui(runs: Sequence[Run]) -> dict[str, list[UiLevel]]:
    """Each engine measured through a UI, its levels beside the same engine's direct levels in the report."""
    return pairs_through_ui([s for run in runs for s in run.summaries], VIA_UI)


def _ui_levels(run: Run, through_ui: dict[str, list[UiLevel]]) -> tuple[UiLevel, ...]:
    engine = run.summaries[0].engine if run.summaries else ""
    is_via_ui = run.info.engine.details.ui is not None and engine.endswith(VIA_UI)
    return tuple(through_ui.get(engine.removesuffix(VIA_UI), [])) if is_via_ui else ()


def _cache_hit_rate(traffic: Traffic | None, runs: Sequence[Run]) -> tuple[Traffic, str]:
    """The scenario's prompt-cache hit rate when it sets one; else the one the runs measured; else none."""
    traffic = traffic or Traffic()
    if traffic.cache_hit_rate is not None:
        return traffic, "the scenario's traffic.cache_hit_rate"
    measured = measured_cache_hit_rate([s for run in runs for s in _measured(run)],
                                       [v for run in runs for v in run.server_views])
    if measured is None:
        return traffic.model_copy(update={"cache_hit_rate": 0.0}), "none measured, none assumed"
    rate, source = measured
    return traffic.model_copy(update={"cache_hit_rate": rate}), source


def _bills(run: Run, decision: Decision, catalog: PriceCatalog) -> tuple[LevelBill, ...]:
    """Each level's usage at the prices of the provider the verdict compares against."""
    compared = decision.compared_to
    price = next((row for row in catalog.providers if compared and row.id == compared.id), None)
    if price is None:
        return ()
    a = decision.pricing.assumptions
    return tuple(level_bill(s.level, token_usage(s), price, a.cache_hit_rate, a.uses_batch_api)
                 for s in run.summaries if s.tokens.usage.num_requests)


def _capacity_level(run: Run) -> MeasuredLevel | None:
    """What a capacity search found: the level at each repeat's capacity, folded into one."""
    if run.capacity is None:
        return None
    labels = run.capacity.capacity_labels
    found = [s for s in run.summaries if s.level in labels]
    if not found:
        return None
    level = repeated_level(found, "capacity" if len(found) > 1 else None)
    watts = power_per_gpu(run.gpu_views, set(labels).__contains__)
    return level if watts is None else replace(level, power_w_per_gpu=watts)


def _kind(run: Run) -> str:
    """The load kind the cost model uses of a run: closed loop when there is any, else open loop, else a trace."""
    kinds = Counter(s.kind for s in run.summaries)
    return next((k for k in ("concurrency", "rate") if kinds[k]), "trace")


def _measured(run: Run) -> tuple[LevelSummary, ...]:
    """The levels the cost model uses: one kind only; of a sweep across adapter counts, those with the most
    adapters (the fleet that serves them all)."""
    kind = _kind(run)
    levels = tuple(s for s in run.summaries if s.kind == kind)
    most = max((parse_label(s.level).adapters or 0 for s in levels), default=0)
    if most:
        levels = tuple(s for s in levels if parse_label(s.level).adapters == most)
    return levels


def num_adapters(runs: Sequence[Run]) -> int | None:
    """How many fine-tunes the runs served: the most of an adapter-count sweep, else the adapters asked for."""
    counts = [parse_label(s.level).adapters or 0 for run in runs for s in run.summaries]
    if any(counts):
        return max(counts)
    names = {a.adapter for run in runs for s in _measured(run) for a in s.adapters or () if a.adapter != "(base)"}
    return len(names) or None


def read_runs(run_dirs: Sequence[Path | Run], slo: SLO | None = None) -> tuple[list[Run], list[str]]:
    """Every run directory that has measurements, each read once (one given as read, and judged by `slo`, is kept
    as it is), and a line for each one skipped (and why)."""
    runs, skipped = [], []
    for given in run_dirs:
        run_dir = given.run_dir if isinstance(given, Run) else Path(given)
        if not run_dir.is_dir():
            raise ReportError(f"{run_dir}: no such directory (expected a run directory written by `bench sweep`)")
        try:
            run = given if isinstance(given, Run) and slo in (None, given.info.slo) else rundir.read_run(run_dir, slo)
        except rundir.RunDirError as exc:
            skipped.append(str(exc))
            continue
        if run.summaries:
            runs.append(run)
        elif not (Path(run_dir) / rundir.REQUESTS_FILE).is_file():
            skipped.append(f"{run_dir}: no {rundir.REQUESTS_FILE}; the sweep ended before any request finished")
        else:
            skipped.append(f"{run_dir}: no measured request yet (status: {run.info.status})")
    if not runs:
        raise NothingToReport("nothing to report: " + ("; ".join(skipped) or "no run directory given"))
    return runs, skipped


def task_decision(runs: Sequence[Run], labels: Sequence[str], settings: DecisionSettings, catalog: PriceCatalog,
                  today: date) -> TaskDecision | None:
    """Runs of agent sessions priced per task (costmodel.tasks); None when no run has a session that completed.
    A task's tokens are pooled over the levels, each level weighed by the sessions it completed."""
    engines, pooled = [], []
    for run, label in zip(runs, labels, strict=True):
        measured = _measured(run)
        levels = tuple(level for s in measured if (level := task_level(s)) is not None)
        if levels:
            engines.append(EngineLevels(label, levels))
        views = {view.level: view for view in run.server_views}
        pooled += [(_task_tokens(s.sessions.tokens, views.get(s.level)), s.sessions.num_completed) for s in measured
                   if s.sessions is not None and s.sessions.tokens is not None]
    if not engines:
        return None
    weight = sum(n for _, n in pooled)

    def mean(name: str) -> float:
        return sum(getattr(t, name) * n for t, n in pooled) / weight

    sources = {t.cached_from for t, _ in pooled}
    tokens = TaskTokens(mean("input_tokens"), mean("cached_tokens"), mean("output_tokens"),
                        cached_from=sources.pop() if len(sources) == 1 else "mixed")
    return decide_tasks(engines, tokens, latency_limits(settings.slo), settings.traffic, settings.pricing,
                        settings.requirements, catalog, today)


def _task_tokens(tokens: SessionTokens, view: ServerView | None) -> TaskTokens:
    """A level's task tokens, cached as the server's usage said; where it said nothing, at the hit rate of its own
    prefix-cache metrics over the level, else as the trace implies."""
    if tokens.cached_from == "implied" and view is not None and view.prefix_cache_hit_rate is not None:
        return TaskTokens(tokens.input_tokens, tokens.input_tokens * view.prefix_cache_hit_rate, tokens.output_tokens,
                          cached_from="server metrics")
    return TaskTokens(tokens.input_tokens, tokens.cached_tokens, tokens.output_tokens, cached_from=tokens.cached_from)


def _session_lane(run: Run, tasks: TaskDecision | None) -> SessionLane | None:
    """One session of the run drawn as a swim lane: from the task operating point's level, else its last level of
    sessions."""
    levels = [s.level for s in run.summaries if s.sessions is not None and s.sessions.num_completed]
    if not levels:
        return None
    point = tasks.costs.level if tasks is not None and tasks.costs is not None else None
    drawn = point if point in levels else levels[-1]
    return next((lane for lane in run.session_lanes if lane.level == drawn), None)


def report_run(run: Run, label: str, decision: Decision, catalog: PriceCatalog,
               through_ui: dict[str, list[UiLevel]], notes: Sequence[str] = (),
               tasks: TaskDecision | None = None) -> ReportRun:
    """One run as the report shows it, made in one pass from what its directory holds and the decision."""
    info = run.info
    gpus = info.gpu_names
    details = info.engine.details
    return ReportRun(
        run_dir=run.run_dir, label=label, status=info.status, summaries=run.summaries, kind=_kind(run),
        missing=run.missing, cut_short=run.cut_short, notes=(*_notes(run), *notes),
        server_views=run.server_views, launched_by=info.engine.launched_by, gpu_views=run.gpu_views,
        gpu_reading=_gpu_reading(info), replica_views=run.replica_views,
        router_policy=details.router.policy if details.router else None,
        replica_budgets=tuple(r.budget_text for r in details.replicas if r.budget_text),
        ui=_ui_in_front(info), ui_screenshot=run.ui_screenshot,
        ui_levels=_ui_levels(run, through_ui), gpu_names=None if gpus is None else tuple(gpus),
        provenance=_provenance(info), repeated=run.repeated,
        capacity=run.capacity.to_json() if run.capacity else None, dataset=info.dataset,
        workload=_workload_text(info), keep_text=bool(info.scenario and info.scenario.workload.keep_text),
        bills=_bills(run, decision, catalog), plan=memory_plan(run), session_lane=_session_lane(run, tasks),
        adapter_counts=tuple(adapter_counts(run.summaries)),
        rules_line=first_line(info.scenario) if info.scenario is not None else None)


def _client_notes(info: RunInfo, summaries: tuple[LevelSummary, ...]) -> list[str]:
    """Load from several client processes is said, with whatever a level's notes add (a loose clock)."""
    workers, ray = info.client.workers, info.client.ray
    notes = []
    if workers > 1 or ray:
        where = f"Ray actors on the cluster at {ray}" if ray else "processes of the machine that ran the sweep"
        notes.append(f"the load came from {workers} client worker(s), {where}; each level is judged by every "
                     "worker's own check on itself")
    levels_by_note: dict[str, list[str]] = {}  # a note several levels share is said once, naming them
    for s in summaries:
        for note in s.notes:
            levels_by_note.setdefault(note, []).append(s.level)
    return notes + [f"{', '.join(levels)}: {note}" for note, levels in levels_by_note.items()]


def _notes(run: Run) -> list[str]:
    """What a reader of the run's figures should know: what is missing or cut short, where the load came
    from, each level's own notes, a dataset sent more than once."""
    info, summaries = run.info, run.summaries
    notes = []
    if info.unread:
        notes.append(f"its run.json (from another version) lacks, or holds in a form this version does not read: "
                     f"{', '.join(info.unread)}; what those would say is left out")
    if info.status != "complete":
        notes.append(f"the sweep did not complete (status: {info.status})")
    if run.missing:
        notes.append(f"planned but never measured: {', '.join(run.missing)}")
    if run.cut_short:
        notes.append(f"cut short before its end: {', '.join(run.cut_short)} (figures from the requests that "
                     "finished)")
    if len({s.kind for s in summaries}) > 1:
        notes.append(f"the cost model uses the {_kind(run)} levels only; the others are shown in the tables")
    notes.extend(_client_notes(info, summaries))
    if (machines := _machines_note(info, summaries)) is not None:
        notes.append(machines)
    dataset = info.dataset
    sent = sum(s.requests.num_requests for s in summaries if s.kind != "trace")
    if dataset is not None and sent > dataset.num_requests:
        notes.append(f"the levels sent {sent:,} requests from a dataset of {dataset.num_requests:,}, each about "
                     f"{sent / dataset.num_requests:.1f} times: a prefix cache may have served the repeats (replay a "
                     "larger file, or shorter levels)")
    return notes


def _machines_note(info: RunInfo, summaries: tuple[LevelSummary, ...]) -> str | None:
    """Which levels ran on which hardware, for a run resumed on other hardware: its curve mixes machines. A level
    measured before a move is among that move's `levels_before` (and every later one's)."""
    moves = info.resumed_elsewhere
    if not moves or info.hardware is None:
        return None
    machines = [info.hardware, *(move.hardware for move in moves)]
    named = [(s.level, machines[sum(s.level not in move.levels_before for move in moves)].kind) for s in summaries]
    mixed = which_ran_on_what(named)
    if mixed is None:
        return None
    return f"resumed on other hardware, so its levels come from more than one machine: {mixed}"


def _workload_text(info: RunInfo) -> str | None:
    """A synthetic workload's lengths in words, for the report (a replayed one is stated by its dataset)."""
    if info.scenario is None or info.dataset:
        return None
    workload = info.scenario.workload
    return (f"synthetic prompts, input {workload.input_tokens.describe()} tokens, output "
            f"{workload.output_tokens.describe()} tokens")


def _provenance(info: RunInfo) -> RunProvenance:
    scenario = info.scenario
    return RunProvenance(
        run_id=info.run_id or None, started_at=info.started_at, finished_at=info.finished_at,
        source=info.source(with_files=True),  # measured here, or imported from which tool: always said
        scenario=scenario.name if scenario else None, levels_planned=tuple(info.levels) or None,
        tool=asdict(info.tool) if info.tool else None, engine=info.engine.to_json(),
        endpoint=asdict(info.endpoint) if info.endpoint else None,
        hardware=info.hardware.to_json() if info.hardware else None,
        workload=scenario.workload.model_dump(mode="json") if scenario else None,
        load=scenario.load.model_dump(mode="json") if scenario else None)


def _gpu_reading(info: RunInfo) -> GpuReading | None:
    """How the run read its GPUs, from run.json's telemetry; None where it says nothing of it."""
    if info.telemetry is None:
        return None
    gpu = info.telemetry.gpu
    return GpuReading(reader=gpu.reader, why_not=gpu.why_not)


def _ui_in_front(info: RunInfo) -> ThroughUi | None:
    """The UI in front of the engine, as run.json's engine details state it."""
    ui = info.engine.details.ui
    if ui is None:
        return None
    page = ui.page
    return ThroughUi(name=ui.name, version=ui.version, page=None if page is None else UiPageSeen(
        screenshot=page.screenshot, answer=page.answer, seconds=page.seconds, why_not=page.why_not))


def _unique_labels(runs: Sequence[Run]) -> list[str]:
    """Each run's engine (and version), with its directory's name where two runs would read the same."""
    counts = Counter(run.info.engine.label for run in runs)
    return [run.info.engine.label if counts[run.info.engine.label] == 1 else
            f"{run.info.engine.label} ({run.run_dir.name})" for run in runs]


def settings_from_run(run_dir: Path) -> DecisionSettings:
    """The decision settings of the scenario a run was measured with (as recorded in its run.json)."""
    try:
        scenario = rundir.read_run_info(run_dir).scenario
    except rundir.RunDirError as exc:
        raise ReportError(f"{exc} (expected a run directory written by `bench sweep`)") from None
    return _settings_of(scenario)


def _settings_of(scenario: Scenario | None) -> DecisionSettings:
    if scenario is None:
        return DecisionSettings()
    return DecisionSettings(slo=scenario.slo, traffic=scenario.traffic, pricing=scenario.pricing,
                            requirements=scenario.requirements)
