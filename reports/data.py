"""Every figure of a report as plain data: what report.json holds and what the templates and plots read.

Built from a `ReportInput` (the decision and the runs it came from); no rendering here, and no figure that
the input does not hold.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, fields, is_dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from common.units import share, tokens, usd
from costmodel.types import CostResult, Decision, LevelCost, ProviderCost
from loadgen.types import LevelSummary, RepeatedLevel, speculates
from reports.energy import energy_block
from reports.inputs import ReportInput, ReportRun
from reports.provider import provider_block
from reports.ui_overhead import bottleneck_sentence

CAVEATS = [
    "A one-request-at-a-time benchmark overstates the cost of self-hosting many times over: a GPU decodes a "
    "batch of requests for about the price of one. These figures come from the measured curve at the SLO.",
    "Provider endpoints are often quantized (FP8 or lower) and may not match the quality of the weights "
    "measured here; compare quality before price.",
    "Tokenizers differ: the same text is a different number of tokens for different models and hosts, so "
    "per-token prices compare exactly only for the same model.",
    "Reasoning or 'thinking' tokens bill as output tokens; a workload with long hidden reasoning costs more "
    "per request than its visible answer suggests.",
    "Prices move both ways, often within months: every price row is dated, and the report warns when one is "
    "older than 90 days. Spot GPUs can be reclaimed; reserved GPUs bill every hour.",
    "Hyperscalers rent these GPUs as 8-GPU nodes; their per-GPU figures are the node price divided by 8. A "
    "managed per-GPU-hour serving product is not a bare VM.",
    "Prompt caching lowers the provider's price here but not the self-hosted throughput, which was measured "
    "on this workload's own prefix reuse.",
]


def jsonable(value: Any) -> Any:
    """Dataclasses, pydantic models, dates, paths and non-finite floats -> JSON values."""
    if is_dataclass(value) and not isinstance(value, type):
        # A field marked NOT_IN_FILES (costmodel.types) stays out: the files keep the fields they had.
        return {f.name: jsonable(getattr(value, f.name)) for f in fields(value) if f.metadata.get("in_files", True)}
    if hasattr(value, "model_dump"):
        return jsonable(value.model_dump(mode="json"))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (date, datetime, Path)):
        return str(value)
    return value


def build_report_data(inp: ReportInput) -> dict[str, Any]:
    decision, runs = inp.decision, list(inp.runs)
    engines = [_engine(result, run, decision.compared_to, i)
               for i, (result, run) in enumerate(zip(decision.results, runs, strict=True))]
    return jsonable({
        "title": _title(decision),
        # a run held to a benchmark's rules: whether its numbers are that benchmark's, said before anything else
        "rules": [f"{run.label}: {run.rules_line}" if len(runs) > 1 else run.rules_line for run in runs
                  if run.rules_line],
        "generated_at": inp.generated_at.isoformat(timespec="seconds"),
        "verdict": decision.verdict,
        "side_by_side": _side_by_side(decision),
        "assumptions": assumptions(decision, runs, inp.cache_hit_source),
        "warnings": _warnings(decision, runs, list(inp.skipped)),
        "stale_prices": decision.stale_prices,
        "slo": decision.slo.describe(decision.attainment_target),
        "inputs": {"settings": inp.settings, "assumptions": decision.pricing.assumptions,
                   "monthly_tokens": decision.pricing.monthly_tokens, "gpu": decision.pricing.gpu_label},
        "best_engine": decision.best.engine if decision.best else None,
        "compared_to": decision.compared_to.id if decision.compared_to else None,
        "engines": engines,
        "min_accuracy": decision.requirements.min_accuracy,
        "min_validity": decision.requirements.min_validity,
        "sensitivity": _sensitivity(decision),
        "owned": _owned(decision),
        "monthly_cost_curve": inp.cost_curve,
        "price_rows": {"gpu": _price_row(decision.pricing.gpu),
                       "providers": [_price_row(row) for row in
                                     (*decision.pricing.providers, *decision.pricing.references)],
                       "files": list(inp.price_origins)},
        "runs": [_provenance(run) for run in runs],
        "agent_sessions": _agent_sessions(inp),
        "finetunes": _finetunes(inp),
        "skipped_runs": list(inp.skipped),
        "caveats": CAVEATS,
    })


def _finetunes(inp: ReportInput) -> dict[str, Any] | None:
    """Runs across LoRA adapters: N fine-tunes priced three ways, each level's adapters, and what each extra
    adapter cost against the base model alone at the same load."""
    levels = [{"engine": run.label, "level": s.level, **asdict(a)} for run in inp.runs for s in run.summaries
              for a in s.adapters or ()]
    counts = [{"engine": run.label, **asdict(c)} for run in inp.runs for c in run.adapter_counts]
    said = inp.finetunes
    if said is None and not levels and not counts:
        return None
    return {"num_adapters": said.num_adapters if said else None, "options": list(said.options) if said else [],
            "lines": list(said.lines) if said else [], "levels": levels, "counts": counts}


def _agent_sessions(inp: ReportInput) -> dict[str, Any] | None:
    """Runs of agent sessions: each level session by session, one session's lane, and the answer in tasks (cost
    per task beside cost per 1M tokens)."""
    runs = [run for run in inp.runs if any(s.sessions is not None for s in run.summaries)]
    if not runs:
        return None
    tasks = inp.tasks
    per_task = {(r.engine, c.label): c for r in tasks.decision.results for c in r.levels} if tasks else {}
    engines = []
    for run in runs:
        views = {view.level: view.prefix_cache_hit_rate for view in run.server_views}
        levels = [{"label": s.level, "kind": s.kind, "load": s.target, **asdict(s.sessions),
                   "step_ttft_p95_ms": {k: v.p95 for k, v in s.sessions.ttft_ms_by_step.items()},
                   "server_hit_rate": views.get(s.level), "task_cost": per_task.get((run.label, s.level))}
                  for s in run.summaries if s.sessions is not None]
        engines.append({"engine": run.label, "levels": levels,
                        "lane": asdict(run.session_lane) if run.session_lane else None})
    options = []
    if tasks is not None and tasks.costs is not None:
        c = tasks.costs
        options.append({"label": f"Self-hosted: {c.engine} at {c.level}", "usd_per_task": c.usd_per_task,
                        "usd_per_m_tokens": c.usd_per_m_tokens, "monthly_usd": c.self_usd_per_month})
        per_m = 1e6 / c.tokens.total if c.tokens.total else None
        options += [{"label": p.id, "usd_per_task": p.usd_per_task, "monthly_usd": p.monthly_usd,
                     "usd_per_m_tokens": p.usd_per_task * per_m if per_m else None} for p in c.providers]
    said = {"answer": tasks.answer, "headline": tasks.headline, "lines": list(tasks.lines), "costs": tasks.costs,
            "options": options} if tasks is not None else None
    return {"engines": engines, "tasks": said}


def _price_row(row: Any) -> dict[str, Any] | None:
    """A price row as the report prints it: its date as its source gives it (a month, or undated)."""
    return None if row is None else {**jsonable(row), "retrieved": row.retrieved_text}


def _title(decision: Decision) -> str:
    """What is priced; and what was measured, when the runs say it was something else (a small model on a CPU
    priced as an 8B model on an H100 is an illustration, and the title says so)."""
    about = decision.subject
    if about.measured_instead is None:
        return f"Self-host or pay per token: {about.priced}"
    return f"Self-host or pay per token: {about.measured_instead}, priced as {about.priced}: illustrative"


def _side_by_side(decision: Decision) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    best, volume = decision.best, decision.pricing.monthly_tokens
    if best is not None and best.usd_per_request is not None:
        fleet = best.fleet
        per_m = (fleet.monthly_usd / volume * 1e6) if fleet and volume else \
            best.usd_per_request * 1e6 / (best.isl + best.osl)
        what = (f"{fleet.total_replicas} x {decision.pricing.assumptions.gpus_per_replica} GPU "
                f"({fleet.gpus} GPUs)" if fleet else "at the operating point, fully busy")
        rows.append({"kind": "self-hosted", "label": f"Self-hosted: {best.engine}, {what}",
                     "monthly_usd": fleet.monthly_usd if fleet else None,
                     "usd_per_m_tokens": per_m,
                     "note": decision.pricing.gpu_label})
    owned = decision.owned
    if owned is not None and owned.fleet is not None and volume:
        fleet = owned.fleet
        rows.append({"kind": "owned", "label": f"Owned: {fleet.servers} server(s), {fleet.gpus_used} GPUs used",
                     "monthly_usd": fleet.monthly_usd, "usd_per_m_tokens": fleet.monthly_usd / volume * 1e6,
                     "note": f"{usd(owned.usd_per_gpu_hour)}/GPU-h all-in; power {owned.server.power_source}"})
    if best is None:
        return rows
    primary = sorted((p for p in best.providers if not p.is_secondary), key=lambda p: (p.usd_per_request, p.id))
    picks = {"cheapest": primary[0], "median": primary[(len(primary) - 1) // 2], "most expensive": primary[-1]} \
        if primary else {}
    seen = set()
    for role, p in picks.items():
        if p.id in seen:
            continue
        seen.add(p.id)
        rows.append(_provider_row(p, f"{role} of {len(primary)} host(s)"))
    rows += [_provider_row(p, "secondary reference (a different model)") for p in best.providers if p.is_secondary]
    return rows


def _owned(decision: Decision) -> dict[str, Any] | None:
    """Own vs rent vs pay per token, with each sensitivity row's saving against the cheaper alternative."""
    owned = decision.owned
    if owned is None:
        return None
    rows = [{"name": row.name, "base_label": row.base_label,
             "variations": [{**asdict(v), "saving_usd_per_month": v.saving_usd_per_month} for v in row.variations]}
            for row in owned.sensitivity]
    payback = owned.payback_phrase() if owned.fleet else None
    return {**asdict(owned), "server_total_usd": owned.server.total_usd, "sensitivity": rows,
            "payback": payback}


def _provider_row(p: ProviderCost, role: str) -> dict[str, Any]:
    note = role + (f"; serves {p.quantization}" if p.quantization else "")
    return {"kind": "reference" if p.is_secondary else "provider", "label": f"{p.id} ({p.model_name})",
            "monthly_usd": p.monthly_usd, "usd_per_m_tokens": p.usd_per_m_tokens, "note": note}


def assumptions(decision: Decision, runs: list[ReportRun], cache_hit_source: str = "assumed") -> list[str]:
    a, lines = decision.pricing.assumptions, []
    best = decision.best
    if best is not None and best.operating_point is not None:
        point = best.operating_point
        lines.append(f"Throughput at the SLO: {point.request_per_s:.2f} requests/s per replica "
                     f"({point.output_tokens_per_s:,.0f} output tokens/s), measured with {best.engine}.")
        lines.append(f"Requests of {best.isl:,.0f} input + {best.osl:,.0f} output tokens (the measured means).")
    volume = decision.pricing.monthly_tokens
    shape = (f"an hourly profile (peak {a.peak_ratio:.2g}x the average, {a.hours_of_operation:,.0f} h/month)"
             if a.hourly_profile else f"peak {a.peak_ratio:g}x the average, {a.hours_of_operation:,.0f} h/month")
    lines.append(f"Traffic: {tokens(volume) + ' tokens/month' if volume else 'volume not given'}, {shape}.")
    lines.append(f"GPU: {decision.pricing.gpu_label}, {a.gpus_per_replica} per replica, billed "
                 f"{a.billed_hours_per_month:,.0f} h/month; each replica planned at {a.headroom:.0%} of its capacity "
                 f"({1 - a.headroom:.0%} headroom), {a.spare_replicas} spare "
                 f"replica(s), at least {a.min_serving_replicas} serving.")
    if decision.pricing.gpu_choice:
        lines.append(f"The GPU price: {decision.pricing.gpu_choice}.")
    lines.append(f"Operations: {usd(a.ops_usd_per_month)}/month.")
    lines.append(f"Provider list prices, {share(a.cache_hit_rate)} prompt-cache hits ({cache_hit_source}), "
                 f"{'batch API discount' if a.uses_batch_api else 'no batch discount'}; reasoning tokens bill as "
                 "output and are in the measured output lengths.")
    lines += [f"Assumed: {text}." for text in decision.pricing.assumed]
    lines += [line for run in runs if (line := _workload_line(run, len(runs) > 1))]
    return lines


def _workload_line(run: ReportRun, name_run: bool) -> str | None:
    """What traffic was measured: the file replayed (by name and sha256, never its text), or the synthetic
    workload's lengths."""
    who = f" ({run.label})" if name_run else ""
    d = run.dataset
    if d is None:
        return f"Workload{who}: {run.workload}." if run.workload else None
    lengths = (f"input tokens p50 {d.input_tokens.p50:,.0f} / p90 {d.input_tokens.p90:,.0f} / p99 "
               f"{d.input_tokens.p99:,.0f}, output p50 {d.output_tokens.p50:,.0f} / p90 {d.output_tokens.p90:,.0f} / "
               f"p99 {d.output_tokens.p99:,.0f} ({d.lengths})") if d.input_tokens.p50 is not None else ""
    how = (f"replayed at its own times x {d.time_scale:g} ({d.span_s:,.0f} s)" if d.time_scale is not None
           else f"{d.turns} turns a conversation" if d.turns else "one request per entry")
    notes = "".join(f"; {note}" for note in d.notes)
    return (f"Workload{who}: {d.name} ({d.format}, sha256 {d.sha256[:12]}), {d.num_requests:,} requests from "
            f"{d.num_entries:,} of its {d.num_in_file:,} entries, {how}; {lengths}{notes}.")


def _warnings(decision: Decision, runs: list[ReportRun], skipped: list[str]) -> list[str]:
    lines = list(decision.warnings)
    for run in runs:
        who = run.label if run.run_dir.name in run.label else f"{run.label} ({run.run_dir.name})"
        lines += [f"{who}: {note}" for note in run.notes]
        hardware = _hardware_warning(run, decision.pricing.gpu.gpu if decision.pricing.gpu else None)
        lines += [hardware] if hardware else []
        if run.keep_text:
            lines.append(f"{who}: requests.jsonl holds the prompts and answers "
                         "(measured with --keep-text); share it only where that text may go")
    lines += [f"skipped: {text}" for text in skipped]
    for result in decision.results:
        lines += list(result.warnings)
    if decision.stale_prices:
        oldest = decision.stale_prices[0]
        lines.append(f"{len(decision.stale_prices)} price(s) used are older than 90 days (oldest: {oldest.id}, "
                     f"{oldest.retrieved}, {oldest.age_days} days): check them, or pass your own with --prices")
    return lines


def _hardware_warning(run: ReportRun, gpu: str | None) -> str | None:
    """Measured on one thing, priced as another? Say so when the run's record can tell."""
    priced = gpu or "the GPU priced here"
    if run.launched_by == "user":
        how = ("imported from another tool's results" if run.provenance.is_imported
               else "measured through an endpoint that was already running")
        return (f"{run.label}: {how}, so the run does not record the hardware that served it; the costs assume "
                f"{priced} per replica: make sure that is what served it")
    if run.gpu_names == ():
        return f"{run.label}: measured on a machine without a GPU but priced as {priced}: the costs are illustrative"
    key = next((part for part in (gpu or "").split("-") if any(c.isdigit() for c in part)), None)
    names = run.gpu_names or ()
    if key and names and not any(re.search(rf"\b{re.escape(key)}\b", n, re.IGNORECASE) for n in names):
        return f"{run.label}: measured on {', '.join(sorted(set(names)))} but priced as {gpu}"
    return None


def _engine(result: CostResult, run: ReportRun, compared: ProviderCost | None, index: int) -> dict[str, Any]:
    costs = {c.label: c for c in result.levels}
    price = result.provider(compared.id) if compared else None
    # A level's repeats share its cost: the cost model priced the level once, from their mean.
    levels = [_level(s, costs.get(s.base_level or s.level), price) for s in run.summaries]
    return {"engine": result.engine, "run_dir": str(run.run_dir), "kind": run.kind, "isl": result.isl,
            "osl": result.osl, "replica_usd_per_hour": result.replica_usd_per_hour,
            "operating_point": result.operating_point, "no_operating_point_reason": result.no_operating_point_reason,
            "usd_per_request": result.usd_per_request, "fleet": result.fleet, "fleet_range": result.fleet_range,
            "usd_per_request_range": result.usd_per_request_range, "providers": result.providers,
            "warnings": result.warnings, "levels": levels,
            "accuracy": result.accuracy, "usd_per_correct_answer": result.usd_per_correct_answer,
            "validity": result.validity,
            "billed": _billed_per_correct_answer(result, run),
            "repeats": [_repeated(r) for r in run.repeated], "capacity": run.capacity,
            "server_view": [asdict(view) for view in run.server_views], "speculation": _speculation(run),
            "provider": provider_block(run.summaries, run.bills),
            "energy": energy_block(run.summaries, run.gpu_views, run.gpu_reading),
            "replicas": _replicas(run), "ui": _ui(run, index), "plan": run.plan}


def _speculation(run: ReportRun) -> list[dict[str, Any]]:
    """Per level, the client's tokens per streamed chunk beside the server's drafts and acceptance; nothing
    where the run shows no speculation (`speculates`)."""
    if not speculates(run.summaries, run.server_views):
        return []
    spec = {v.level: v.spec for v in run.server_views if v.spec is not None}
    return [{"level": s.level, "tokens_per_chunk": s.tokens.mean_tokens_per_chunk,
             "acceptance_rate": found.acceptance_rate if (found := spec.get(s.level)) else None,
             "mean_acceptance_length": found.mean_acceptance_length if found else None,
             "by_position": found.positions_text() if found else "",
             "request_acceptance_rate": s.tokens.request_acceptance_rate}
            for s in run.summaries]


def _billed_per_correct_answer(result: CostResult, run: ReportRun) -> dict[str, Any] | None:
    """An endpoint the toolkit did not launch (a provider, most often): its answers at the compared provider's
    prices, per request and per correct answer, from the usage it reported."""
    requests = sum(b.usage.num_requests for b in run.bills)
    if run.launched_by != "user" or result.accuracy is None or not requests or result.accuracy.accuracy <= 0:
        return None
    per_request = sum(b.billed_usd for b in run.bills) / requests
    return {"provider": run.bills[0].provider_id, "usd_per_request": per_request,
            "usd_per_correct_answer": per_request / result.accuracy.accuracy}


def _ui(run: ReportRun, index: int) -> dict[str, Any] | None:
    """Measured through Open WebUI: what its page showed, and each level beside the same one direct."""
    if run.ui is None:
        return None
    levels = [{**asdict(lv), "ttft_added_ms": lv.ttft_added_ms, "itl_added_ms": lv.itl_added_ms,
               "throughput_share": lv.throughput_share} for lv in run.ui_levels]
    return {"name": run.ui.name, "version": run.ui.version, "page": run.ui.page or {},
            "levels": levels,
            "bottleneck": bottleneck_sentence(list(run.ui_levels)) if run.ui_levels else None,
            "image": f"ui-{index}" if run.ui_screenshot is not None else None}


def _replicas(run: ReportRun) -> dict[str, Any] | None:
    """Behind a router: per level, each replica's load (its share of the tokens generated) and prefix hits."""
    if not run.replica_views:
        return None
    totals: dict[str, float] = {}
    for _, view in run.replica_views:
        totals[view.level] = totals.get(view.level, 0.0) + (view.generated_tokens or 0.0)
    rows = [{"replica": index, **asdict(view),
             "load_share": (view.generated_tokens or 0.0) / totals[view.level] if totals[view.level] else None}
            for index, view in run.replica_views]
    return {"policy": run.router_policy, "count": len({i for i, _ in run.replica_views}),
            "budgets": [f"replica {i}: {text}" for i, text in enumerate(run.replica_budgets)],
            "levels": sorted(rows, key=lambda r: (r["level"], r["replica"]))}


def _repeated(level: RepeatedLevel) -> dict[str, Any]:
    return {"label": level.level, "kind": level.kind, "load": level.target, "num_repeats": level.num_repeats,
            "labels": level.labels, "figures": level.figures}


def _level(s: LevelSummary, cost: LevelCost | None, price: ProviderCost | None) -> dict[str, Any]:
    carried, latency, mean_output_tokens = s.throughput, s.latency, s.tokens.mean_output_tokens
    row = {"label": s.level, "base_level": s.base_level or s.level, "repeat": s.repeat, "kind": s.kind,
           "load": s.target, "num_ok": s.requests.num_ok, "num_failed": s.requests.num_failed,
           "failure_rate": s.requests.failure_rate, "output_tokens_per_s": carried.output_tokens_per_s,
           "request_per_s": carried.output_tokens_per_s / mean_output_tokens if mean_output_tokens else 0.0,
           "window_request_per_s": carried.request_per_s, "goodput_request_per_s": carried.goodput_request_per_s,
           "slo_attainment": carried.slo_attainment, "ttft_ms": latency.ttft_ms, "itl_ms": latency.itl_ms,
           "tpot_ms": latency.tpot_ms, "e2e_ms": latency.e2e_ms, "is_valid": s.is_valid,
           "invalid_reasons": s.invalid_reasons,
           "quality": s.quality, "validity": s.validity,
           "used_for_cost": cost is not None, "cost": cost, "meets_slo": cost.meets_slo if cost else None,
           "break_even_utilization": None}
    if cost is not None and price is not None and cost.usd_per_request is not None and price.usd_per_request > 0:
        row["break_even_utilization"] = cost.usd_per_request / price.usd_per_request
    return row


def _sensitivity(decision: Decision) -> dict[str, Any] | None:
    sens = decision.sensitivity
    if sens is None:
        return None
    return {"baseline": {**asdict(sens.baseline), "saving_usd_per_month": sens.baseline.saving_usd_per_month},
            "compared_to": decision.compared_to.id if decision.compared_to else None,
            "rows": [{"name": row.name, "base_label": row.base_label, "flips": sens.flips(row),
                      "variations": [{**asdict(v), "saving_usd_per_month": v.saving_usd_per_month}
                                     for v in row.variations]} for row in sens.rows]}


def _provenance(run: ReportRun) -> dict[str, Any]:
    p = run.provenance
    recorded = {"started_at": p.started_at, "finished_at": p.finished_at, "tool": p.tool, "engine": p.engine,
                "endpoint": p.endpoint, "hardware": p.hardware, "scenario": p.scenario, "workload": p.workload,
                "load": p.load, "levels_planned": p.levels_planned, "source": p.source}
    return {"run_dir": str(run.run_dir), "run_id": p.run_id, "status": run.status, **recorded,
            "dataset": asdict(run.dataset) if run.dataset else None, "keep_text": run.keep_text,
            "levels_measured": [s.level for s in run.summaries], "missing": run.missing, "cut_short": run.cut_short,
            "notes": run.notes}
