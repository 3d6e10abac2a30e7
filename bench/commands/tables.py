"""The tables a command prints (rich): a run's levels, its sessions, grades, adapters, repeats, replicas and server
metrics, comparisons, trends, a tune, the engines. Tables only: they are built from records, never printed here
and nothing here measures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from bench.flows.tune_ranking import ConfigResult
from bench.run.capacity_record import CapacityRecord
from bench.run.history import Trend
from common.units import share, usd
from costmodel.finetunes import FinetuneDecision
from engines.availability import Availability
from loadgen.adapters import adapter_counts
from loadgen.arrivals import parse_label
from loadgen.quality.results import Scores
from loadgen.types import Distribution, Interval, LevelSummary, RepeatedLevel, ServerView
from reports.ui_overhead import UiLevel

if TYPE_CHECKING:
    pass


class DataTable(Table):
    """A table of data: its title and cells are shown as given, never read as rich markup (a name from a file or
    a server may hold `[/x]` or `[bold]`, which would crash the table or restyle it)."""

    def __init__(self, *headers: Any, title: str | Text | None = None, **options: Any) -> None:
        super().__init__(*headers, title=Text(title, style="table.title") if isinstance(title, str) else title,
                         **options)

    def add_row(self, *cells: Any, **options: Any) -> None:  # rich's signature
        super().add_row(*(Text(cell) if isinstance(cell, str) else cell for cell in cells), **options)


class Footnotes:
    """A table's notes as numbered footnotes under it: a row's note cell holds only their numbers (`2,3`), so a
    long note never wraps a row over several lines. A note met again keeps the number it was first given."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}

    def mark(self, notes: list[str]) -> str:
        """The numbers of `notes`, each numbered when first met ('' for none)."""
        return ",".join(str(self.numbers.setdefault(note, len(self.numbers) + 1)) for note in dict.fromkeys(notes))

    def under(self, table: Table) -> Table:
        """`table` with the footnotes as its caption: plain text (a note from a file or a server is never markup),
        wrapped to the table's width."""
        if self.numbers:
            table.caption = Text("\n".join(f"{number}. {note}" for note, number in self.numbers.items()))
            table.caption_justify = "left"
        return table


def capacity_line(capacity: CapacityRecord, sessions: bool = False) -> str:
    """`capacity: 61 users (lowest failing 64; within 5 % ...; 9 probes)`, from capacity.json; of agent sessions,
    in sessions alive (or starting a second)."""
    units = ("sessions alive", "sessions/s") if sessions else ("users", "requests/s")
    unit = units[0] if capacity.kind == "concurrency" else units[1]
    repeats = capacity.repeats
    probes = sum(r.num_probes for r in repeats)
    if capacity.capacity is None:
        return f"capacity: none found ({'; '.join(capacity.stopped_because)}; {probes} probes)"
    spread = capacity.capacity_interval
    if len(repeats) > 1 and spread is not None:
        values = ", ".join(f"{r.capacity:g}" if r.capacity is not None else "-" for r in repeats)
        return (f"capacity: {spread.mean:.4g} {unit}, 95 % interval {spread.low:.4g} to {spread.high:.4g} "
                f"({len(repeats)} repeats: {values}; {probes} probes)")
    failing = capacity.lowest_failing
    return (f"capacity: {capacity.capacity:g} {unit} (lowest failing: {f'{failing:g}' if failing else 'none'}; "
            f"{repeats[0].stopped_because}; {probes} probes)")


def summary_table(summaries: list[LevelSummary], title: str = "") -> Table:
    table = DataTable(title=title or None, show_lines=False)
    columns = ["engine", "level", "ok/failed", "req/s", "out tok/s", "TTFT p50/p99 ms", "ITL p50/p99 ms",
               "TPOT p50 ms", "E2E p50 ms", "goodput req/s", "SLO met", "in flight", "note"]
    for name in columns:
        table.add_column(name, justify="left" if name in ("engine", "level", "note") else "right")
    footnotes = Footnotes()
    for s in summaries:
        carried, latency = s.throughput, s.latency
        table.add_row(
            s.engine, s.level, f"{s.requests.num_ok}/{s.requests.num_failed}", _fmt(carried.request_per_s, 2),
            _fmt(carried.output_tokens_per_s, 1), _p50_p99(latency.ttft_ms), _p50_p99(latency.itl_ms),
            _fmt(latency.tpot_ms.p50), _fmt(latency.e2e_ms.p50), _fmt(carried.goodput_request_per_s, 2),
            f"{carried.slo_attainment:.0%}", _fmt(carried.mean_in_flight, 1), footnotes.mark(_notes(s)),
        )
    return footnotes.under(table)


def quality_table(summaries: list[LevelSummary], title: str = "graded answers") -> Table:
    """Each level of a graded dataset: the share of answers that were right, with its 95 % interval."""
    table = DataTable(title=title)
    for name in ("engine", "level", "graded", "accuracy", "95 % interval", "failed (not graded)"):
        table.add_column(name, justify="left" if name in ("engine", "level") else "right")
    for s in summaries:
        q = s.quality
        if q is not None:
            table.add_row(s.engine, s.level, str(q.n), f"{q.accuracy:.1%}", f"{q.low:.1%} to {q.high:.1%}",
                          str(s.requests.num_failed))
    return table


def validity_table(summaries: list[LevelSummary], title: str = "shaped answers") -> Table:
    """Each level of shaped answers (JSON, a schema, tool calls): the share valid with its 95 % interval, and the
    invalid ones by fault."""
    table = DataTable(title=title)
    for name in ("engine", "level", "judged", "valid", "95 % interval", "invalid by fault", "failed (not judged)"):
        table.add_column(name, justify="left" if name in ("engine", "level", "invalid by fault") else "right")
    for s in summaries:
        v = s.validity
        if v is not None:
            table.add_row(s.engine, s.level, str(v.n), f"{v.valid:.1%}", f"{v.low:.1%} to {v.high:.1%}",
                          v.faults_text() or "-", str(s.requests.num_failed))
    return table


def quality_runs_table(runs: list[tuple[str, Scores]], title: str = "quality") -> Table:
    """Each engine on one eval (its name and scores): accuracy with its 95 % interval, and by category."""
    categories = sorted({name for _, scores in runs for name in scores.by_category})
    table = DataTable(title=title)
    for name in ("engine", "graded", "accuracy", "95 % interval", "failed", *categories):
        table.add_column(name, justify="left" if name == "engine" else "right")
    for engine, s in runs:
        acc = s.overall
        by = [f"{a.accuracy:.0%} of {a.n}" if (a := s.by_category.get(c)) else "-" for c in categories]
        table.add_row(engine, str(acc.n if acc else 0), f"{acc.accuracy:.1%}" if acc else "-",
                      f"{acc.low:.1%} to {acc.high:.1%}" if acc else "-", str(s.num_failed), *by)
    return table


def sessions_table(summaries: list[LevelSummary], title: str = "agent sessions") -> Table:
    """Each level of agent sessions, session by session: how many ended how, how long, how many an hour, TTFT by
    step, and the prefix-cache hit rate the trace implies beside the one the server reported."""
    table = DataTable(title=title)
    columns = ["engine", "level", "sessions", "completed/cut/failed", "duration p50/p95 s", "per hour", "alive",
               "TTFT p95 by step ms", "hit rate implied/measured"]
    for name in columns:
        table.add_column(name, justify="left" if name in ("engine", "level") else "right")
    for s in summaries:
        f = s.sessions
        if f is None:
            continue
        steps = " / ".join(_fmt(d.p95, 0) for d in f.ttft_ms_by_step.values())
        table.add_row(s.engine, s.level, str(f.num_started), f"{f.num_completed}/{f.num_cut}/{f.num_failed}",
                      f"{_fmt(f.duration_s.p50, 1)}/{_fmt(f.duration_s.p95, 1)}", _fmt(f.per_hour, 0),
                      _fmt(f.mean_alive, 1), steps, f"{share(f.implied_hit_rate)}/{share(f.measured_hit_rate)}")
    return table


def adapters_table(summaries: list[LevelSummary], title: str = "each LoRA adapter's part of its level") -> Table:
    """Each level across adapters, adapter by adapter: its requests and their share, its output tokens a second
    (the rows of a level add up to it), TTFT and TPOT."""
    table = DataTable(title=title)
    for name in ("engine", "level", "adapter", "requests", "share", "out tok/s", "TTFT p50/p95 ms", "TPOT p50 ms",
                 "E2E p50 ms"):
        table.add_column(name, justify="left" if name in ("engine", "level", "adapter") else "right")
    for s in summaries:
        for a in s.adapters or ():
            table.add_row(s.engine, s.level, a.adapter, f"{a.num_ok}/{a.num_requests}", f"{a.share:.0%}",
                          _fmt(a.output_tokens_per_s, 1), f"{_fmt(a.ttft_ms.p50)}/{_fmt(a.ttft_ms.p95)}",
                          _fmt(a.tpot_ms.p50), _fmt(a.e2e_ms.p50))
    return table


def adapter_counts_table(summaries: list[LevelSummary], views: list[ServerView],
                         title: str = "what each extra adapter costs (x: against the base model alone, same load)"
                         ) -> Table:
    """A sweep across adapter counts: each count's throughput and TTFT beside the base model's at the same load,
    and the distinct adapters the server's batch held (vLLM's LoRA series, where it publishes it)."""
    by_level = {v.level: v for v in views}
    notes = {s.level: _notes(s) for s in summaries}
    tpot = {s.level: s.latency.tpot_ms.p50 for s in summaries}
    engines = {s.level: s.engine for s in summaries}
    table = DataTable(title=title)
    for name in ("engine", "level", "adapters", "out tok/s", "x", "TTFT p95 ms", "x p95", "TPOT p50 ms",
                 "adapters a batch", "note"):
        table.add_column(name, justify="left" if name in ("engine", "level", "note") else "right")
    footnotes = Footnotes()
    for c in adapter_counts(summaries):
        view = by_level.get(c.level)
        table.add_row(engines[c.level], c.level, str(c.adapters) if c.adapters else "base alone",
                      _fmt(c.output_tokens_per_s, 1), _ratio(c.throughput_ratio), _fmt(c.ttft_p95_ms),
                      _ratio(c.ttft_ratio), _fmt(tpot[c.level]),
                      _fmt(view.mean_running_adapters, 1) if view else "-", footnotes.mark(notes[c.level]))
    return footnotes.under(table)


def _ratio(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def history_table(trends: list[Trend]) -> Table:
    """Each configuration's runs at each level, oldest to newest, and what the newest did."""
    metric = trends[0].metric if trends else ""
    table = DataTable(title=f"history of {metric} (newest last; its expected range from the earlier runs, 95 %)")
    for name in ("configuration", "level", "runs", "values", "expected", "newest"):
        table.add_column(name, justify="left" if name in ("configuration", "level", "newest") else "right")
    for t in trends:
        values = " ".join(f"{p.value:.4g}" for p in t.points[-6:])
        expected = f"{t.interval[0]:.4g} to {t.interval[1]:.4g}" if t.interval else "-"
        table.add_row(t.label, t.level, str(len(t.points)), ("... " if len(t.points) > 6 else "") + values,
                      expected, t.verdict)
    return table


def finetunes_table(d: FinetuneDecision) -> Table:
    """N fine-tunes three ways: self-hosted together, each host's serverless LoRA, N dedicated deployments."""
    table = DataTable(title=f"{d.num_adapters} LoRA fine-tune{'s' * (d.num_adapters > 1)}, served three ways")
    for name in ("option", "USD a month", "how", "price dated"):
        table.add_column(name, justify="right" if name == "USD a month" else "left")
    for o in d.options:
        dated = "-" if o.row_id is None else ("undated" if o.retrieved is None else o.retrieved.isoformat())
        table.add_row(o.label, usd(o.monthly_usd) if o.monthly_usd is not None else "-", o.detail,
                      dated + (" (check it)" if o.is_stale else ""))
    return table


def repeats_table(repeated: list[RepeatedLevel], title: str = "levels measured more than once") -> Table:
    """Each repeated level: the mean of its repeats with the 95 % interval, and the values themselves."""
    table = DataTable(title=title)
    for name in ("engine", "level", "repeats", "out tok/s", "TTFT p95 ms", "TPOT p95 ms", "SLO met"):
        table.add_column(name, justify="left" if name in ("engine", "level") else "right")
    for r in repeated:
        table.add_row(r.engine, r.level, str(r.num_repeats), _interval(r.figures["output_tokens_per_s"], 1),
                      _interval(r.figures["ttft_ms_p95"], 0), _interval(r.figures["tpot_ms_p95"], 1),
                      share(r.figures["slo_attainment"].mean))
    return table


def _interval(figure: Interval, digits: int) -> str:
    values = ", ".join(f"{v:,.{digits}f}" for v in figure.values)
    return f"{_fmt(figure.mean, digits)} ± {_fmt(figure.half_width, digits)} [{values}]"


def replica_view_table(views: list[tuple[int, ServerView]], title: str, budgets: dict[int, str] | None = None) -> Table:
    """Each replica behind a router, per level: its budget, how busy it was, its share of the tokens generated
    at that level, its prefix hits."""
    budgets = budgets or {}
    totals: dict[str, float] = {}
    for _, v in views:
        totals[v.level] = totals.get(v.level, 0.0) + (v.generated_tokens or 0.0)
    table = DataTable(title=title)
    for name in ("level", "replica", *(("budget",) if budgets else ()), "running", "waiting", "tokens generated",
                 "share of tokens", "prefix hit rate"):
        table.add_column(name, justify="left" if name in ("level", "budget") else "right")
    for index, v in sorted(views, key=lambda item: (item[1].level, item[0])):
        total = totals.get(v.level)
        table.add_row(v.level, str(index), *((budgets.get(index, "-"),) if budgets else ()), _fmt(v.mean_running),
                      _fmt(v.mean_waiting), _fmt(v.generated_tokens, 0),
                      share((v.generated_tokens or 0.0) / total) if total else "-", share(v.prefix_cache_hit_rate))
    return table


def ui_overhead_table(levels: list[UiLevel], title: str) -> Table:
    """Direct to the engine and through the UI, level by level: TTFT and ITL p50 and what the UI added,
    output tokens/s and the share the UI kept."""
    table = DataTable(title=title)
    for name in ("level", "TTFT p50 direct", "via UI", "added", "ITL p50 direct", "via UI", "added",
                 "tok/s direct", "via UI", "kept"):
        table.add_column(name, justify="left" if name == "level" else "right")
    for lv in levels:
        table.add_row(lv.level, _fmt(lv.ttft_p50_direct_ms), _fmt(lv.ttft_p50_ui_ms), _signed(lv.ttft_added_ms),
                      _fmt(lv.itl_p50_direct_ms), _fmt(lv.itl_p50_ui_ms), _signed(lv.itl_added_ms),
                      _fmt(lv.tokens_per_s_direct), _fmt(lv.tokens_per_s_ui), share(lv.throughput_share))
    return table


def tune_table(results: list[ConfigResult], chosen: ConfigResult | None, default: ConfigResult | None,
               objective: str, min_accuracy: float | None = None) -> Table:
    """Each configuration of a tune: capacity and throughput at the operating point, what that costs, time to
    ready, and the objective's figure against the default's; the best marked."""
    table = DataTable(title=f"configurations, best by {objective} marked *")
    from bench.flows.tune_ranking import accuracy_note

    graded = any(r.accuracy is not None for r in results)
    nodes = any(r.node for r in results)
    for name in ("configuration", "status", *(["node"] if nodes else []), "capacity", "out tok/s at capacity",
                 "$/1M out tok", "ready s",
                 "TTFT p50 lowest load", "peak out tok/s", "vs default", *(["accuracy"] if graded else []), "note"):
        table.add_column(name, justify="left" if name in ("configuration", "status", "node", "note") else "right")
    footnotes = Footnotes()
    for r in results:
        mark = " *" if chosen is not None and r.name == chosen.name else ""
        accuracy = [f"{r.accuracy.accuracy:.1%}" if r.accuracy else "-"] if graded else []
        note = footnotes.mark([n for n in (r.busy, accuracy_note(r, default, min_accuracy)) if n])
        node = [r.node or "-"] if nodes else []
        table.add_row(r.name + mark, r.status.split(":")[0], *node, _fmt(r.capacity_load, 1),
                      _fmt(r.output_tokens_per_s), _fmt(r.usd_per_m_output_tokens, 2), _fmt(r.time_to_ready_s),
                      _fmt(r.ttft_p50_ms_lowest_load),
                      _fmt(r.peak_output_tokens_per_s), _against(r, default, objective), *accuracy, note)
    return footnotes.under(table)


def _against(result: ConfigResult, default: ConfigResult | None, objective: str) -> str:
    """The objective's figure as a ratio to the default's (x1.25: 25 % better for capacity and throughput)."""
    from bench.flows.tune_ranking import objective_figure

    mine, theirs = objective_figure(result, objective), objective_figure(default, objective) if default else None
    return f"x{mine / theirs:.2f}" if mine and theirs else "-"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+,.1f}"


def server_view_table(views: list[ServerView], title: str) -> Table:
    """What the server's own metrics said during each level (means over the samples taken while it ran); behind
    a router, its replicas' summed."""
    replicas = max((v.num_replicas for v in views), default=1)
    table = DataTable(title=title + (f" ({replicas} replicas summed; hits pooled over their lookups)"
                                 if replicas > 1 else ""))
    lora = any(v.mean_running_adapters is not None for v in views)
    columns = ["level", "samples", "running", "waiting", "KV cache max", "preemptions", "prefix hit rate"]
    for name in columns + (["adapters running/waiting"] if lora else []):
        table.add_column(name, justify="left" if name == "level" else "right")
    for v in views:
        adapters = [f"{_fmt(v.mean_running_adapters)}/{_fmt(v.mean_waiting_adapters)}"] if lora else []
        table.add_row(v.level, str(v.num_samples), _fmt(v.mean_running), _fmt(v.mean_waiting),
                      share(v.max_kv_cache_usage), _fmt(v.preemptions, 0), share(v.prefix_cache_hit_rate), *adapters)
    return table


def spec_decode_table(summaries: list[LevelSummary], views: list[ServerView], title: str) -> Table:
    """Speculative decoding per level: the client's tokens per streamed chunk (every engine: several where a step
    emits several) beside the server's drafts and acceptance, as vLLM defines them (SpecDecodeView)."""
    table = DataTable(title=title)
    for name in ("level", "tokens/chunk (client)", "drafts accepted", "accept length", "accepted by position",
                 "accepted (per request)"):
        table.add_column(name, justify="left" if name in ("level", "accepted by position") else "right")
    spec = {v.level: v.spec for v in views}
    for summary in summaries:
        found = spec.get(summary.level)
        positions = found.positions_text() if found else ""
        table.add_row(summary.level, _fmt(summary.tokens.mean_tokens_per_chunk, 2),
                      share(found.acceptance_rate) if found else "-",
                      _fmt(found.mean_acceptance_length, 2) if found else "-", positions or "-",
                      share(summary.tokens.request_acceptance_rate))
    return table


def comparison_table(runs: list[tuple[Path, str, list[LevelSummary]]]) -> Table:
    """Runs side by side, level by level, each with its source (measured here, or imported from which tool);
    output tokens/s also as a ratio to the first run's same level."""
    baseline = {s.level: s.throughput.output_tokens_per_s for s in runs[0][2]} if runs else {}
    table = DataTable(title="comparison (x = output tokens/s relative to the first run)")
    for name in ["run", "source", "engine", "level", "ok/failed", "out tok/s", "x", "TTFT p50/p99 ms",
                 "ITL p50/p99 ms", "goodput req/s", "note"]:
        table.add_column(name, justify="left" if name in ("run", "source", "engine", "level", "note") else "right")
    levels = sorted({s.level for _, _, summaries in runs for s in summaries}, key=_level_order)
    footnotes = Footnotes()
    for level in levels:
        for run_dir, source, summaries in runs:
            for s in (s for s in summaries if s.level == level):
                base = baseline.get(level)
                ratio = f"{s.throughput.output_tokens_per_s / base:.2f}" if base else "-"
                table.add_row(run_dir.name, source, s.engine, s.level, f"{s.requests.num_ok}/{s.requests.num_failed}",
                              _fmt(s.throughput.output_tokens_per_s, 1), ratio, _p50_p99(s.latency.ttft_ms),
                              _p50_p99(s.latency.itl_ms), _fmt(s.throughput.goodput_request_per_s, 2),
                              footnotes.mark(_notes(s)))
    return footnotes.under(table)


def engines_table(engines: list[Availability]) -> Table:
    table = DataTable(title="engines")
    for name in ("engine", "can run here", "detail"):
        table.add_column(name)
    for engine in engines:
        table.add_row(engine.name, "yes" if engine.can_run else "no", Text(engine.detail))  # no markup: "[all]"
    return table


def _level_order(label: str) -> tuple[str, float, int, int, int]:
    """c1 before c8 before c8#2 before c32 (c16+a0 before c16+a4); closed-loop levels before arrival rates."""
    parsed = parse_label(label)
    target = parsed.target if parsed.target == parsed.target else 0.0  # NaN sorts first
    return parsed.base[:1], target, parsed.adapters or 0, parsed.repeat, parsed.attempt


def _p50_p99(distribution: Distribution) -> str:
    return f"{_fmt(distribution.p50)}/{_fmt(distribution.p99)}"


def _notes(s: LevelSummary) -> list[str]:
    """What a reader should know of a level beside its figures, one note each (printed as footnotes)."""
    carried, latency = s.throughput, s.latency
    notes = []
    if not s.is_valid:
        notes.append("INVALID: " + "; ".join(s.invalid_reasons))
    if s.requests.failures_by_kind:
        notes.append(", ".join(f"{k}: {v}" for k, v in sorted(s.requests.failures_by_kind.items())))
    if not carried.is_steady_window:
        notes.append("no steady window")
    elif s.kind == "concurrency" and carried.request_per_s * carried.window_s < s.target:
        # Tokens/s is still sound; a request rate from fewer completions than users is not.
        notes.append(f"only {carried.request_per_s * carried.window_s:.0f} requests ended in the steady window: "
                     "lengthen --duration for a steady req/s")
    if s.requests.num_short_outputs:
        notes.append(f"{s.requests.num_short_outputs} short outputs")
    notes.extend(s.notes)
    if latency.ttft_ms_later_turns.p50 is not None:
        first, later = _fmt(latency.ttft_ms_first_turn.p50), _fmt(latency.ttft_ms_later_turns.p50)
        notes.append(f"TTFT p50 turn 1 {first} ms, later turns {later} ms")
    if s.tokens.usage.reasoning_tokens:
        notes.append(f"reasoning {share(s.tokens.usage.reasoning_share)} of output, TTFVT p50 "
                     f"{_fmt(latency.ttfvt_ms.p50, 0)} ms")
    if s.requests.num_throttled:
        wait_ms = latency.retry_wait_ms.p50
        waited = f", retried after {_fmt(wait_ms, 0)} ms p50" if wait_ms is not None else ""
        notes.append(f"throttled {s.requests.throttle_rate:.0%} of requests{waited}")
    return notes


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"

