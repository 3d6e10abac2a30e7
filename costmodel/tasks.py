"""Agent tasks priced (COSTMODEL.md, "Agent tasks"): the decision made again with a task as the unit.

A level of sessions comes in as a `MeasuredLevel` whose rate is tasks a second and whose lengths are one
task's tokens (`bench.flows.costinputs.task_level`). Since every formula of the model is linear in requests,
the same model prices tasks: the operating point is the highest number of sessions alive that meets the SLO
(the session targets included), `C_task = P / (3600 * S*)`, a provider's task `a_task` is its calls' input
priced cached and uncached at the measured share plus their output, and a fleet and a crossover follow from
tasks a month. This module turns that decision back into tasks: cost per task on each side, tasks an hour per
GPU, the crossover in tasks a month, and the sentences a reader signs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from common.units import usd
from costmodel.decide import decide
from costmodel.inputs import Pricing, Requirements, Traffic
from costmodel.model import PER_MILLION
from costmodel.prices import PriceCatalog
from costmodel.types import (
    CostResult,
    Decision,
    EngineLevels,
    LatencyLimits,
    ProviderTask,
    TaskCosts,
    TaskDecision,
    TaskTokens,
)


def decide_tasks(engines: Sequence[EngineLevels], tokens: TaskTokens, slo: LatencyLimits, traffic: Traffic | None,
                 pricing: Pricing, requirements: Requirements, catalog: PriceCatalog, today: date) -> TaskDecision:
    """`engines`: each engine's levels of sessions as task levels; `tokens`: a task's, measured. The traffic's
    `monthly_tasks` (else its tokens over a task's) sets the volume; the cached share of a task's input is the
    measured one."""
    traffic = traffic or Traffic()
    monthly_tasks = traffic.monthly_tasks
    if monthly_tasks is None and traffic.total_tokens() is not None and tokens.total > 0:
        monthly_tasks = traffic.total_tokens() / tokens.total  # type: ignore[operator]
    as_tasks = Traffic.model_validate({
        **traffic.model_dump(), "monthly_tasks": None, "monthly_input_tokens": None, "monthly_output_tokens": None,
        "monthly_tokens": monthly_tasks * tokens.total if monthly_tasks else None,
        "cache_hit_rate": tokens.cached_share})
    decision = decide(engines, slo, as_tasks, pricing, requirements, catalog, today)
    best = decision.best
    if best is None or best.operating_point is None:
        return TaskDecision(decision, None, tuple(decision.verdict.lines), "undecided",
                            "No level of sessions met the SLO: no cost per task to give.")
    costs = _costs(best, tokens, monthly_tasks, decision.pricing.assumptions.gpus_per_replica)
    answer, headline = _headline(costs, decision)
    return TaskDecision(decision, costs, tuple(_lines(costs, decision)), answer, headline)


def _headline(costs: TaskCosts, decision: Decision) -> tuple[str, str]:
    """The answer in tasks, against the provider the decision compares with: the requirements first (they
    decide whatever the cost), then the cheaper side at the traffic's volume, else where the crossover is."""
    compared = next((p for p in costs.providers if decision.compared_to and p.id == decision.compared_to.id), None)
    self_task = usd(costs.usd_per_task)
    if decision.verdict.answer == "self-host-required":
        return "self-host-required", f"Self-host (required): {self_task} per task at {costs.level}."
    if compared is None:
        return "undecided", f"Self-hosting costs {self_task} per task; there is no provider price to compare it with."
    per_task = f"{usd(compared.usd_per_task)} per task at {compared.id} against {self_task} self-hosted"
    if costs.monthly_tasks and costs.self_usd_per_month is not None and compared.monthly_usd is not None:
        volume = f"{costs.monthly_tasks:,.0f} tasks/month"
        if costs.self_usd_per_month < compared.monthly_usd:
            return "self-host", (f"Self-host: {usd(costs.self_usd_per_month)}/month against "
                                 f"{usd(compared.monthly_usd)}/month at {compared.id} for {volume} ({per_task}).")
        return "pay-per-token", (f"Pay per token: {usd(compared.monthly_usd)}/month at {compared.id} against "
                                 f"{usd(costs.self_usd_per_month)}/month to self-host {volume} ({per_task}).")
    if compared.crossover_tasks is None:
        return "pay-per-token", f"Pay per token at any volume: {per_task}."
    return "depends-on-volume", (f"Depends on volume: self-hosting is cheaper above {compared.crossover_tasks:,.0f} "
                                 f"tasks/month ({per_task}).")


def _costs(best: CostResult, tokens: TaskTokens, monthly_tasks: float | None, gpus: int) -> TaskCosts:
    point = best.operating_point
    assert point is not None
    per_task = best.usd_per_request
    providers = tuple(ProviderTask(
        p.id, p.usd_per_request,
        p.crossover.monthly_tokens / tokens.total if p.crossover and p.crossover.monthly_tokens else None,
        p.crossover.reason if p.crossover else "", p.monthly_usd) for p in best.providers if not p.is_secondary)
    return TaskCosts(
        engine=best.engine, level=point.level, sessions_alive=point.load,
        tasks_per_hour_per_gpu=point.request_per_s * 3600 / gpus, usd_per_task=per_task,
        usd_per_m_tokens=per_task * PER_MILLION / tokens.total if per_task is not None and tokens.total else None,
        tokens=tokens, monthly_tasks=monthly_tasks, self_usd_per_month=best.fleet.monthly_usd if best.fleet else None,
        providers=providers)


def _lines(costs: TaskCosts, decision: Decision) -> list[str]:
    t = costs.tokens
    how = {"measured": "as the server's usage reported",
           "server metrics": "at the hit rate of the server's own prefix-cache metrics: its usage did not say",
           "implied": "as the trace implies: the server did not report its cached tokens"}.get(
        t.cached_from, "as the server reported where it did, else as the trace implies")
    lines = [f"A task (one session) sends {t.input_tokens:,.0f} input tokens over its calls, {t.cached_share:.0%} of "
             f"them cached ({how}), and gets {t.output_tokens:,.0f} output tokens back (reasoning included)."]
    if costs.usd_per_task is not None:
        lines.append(f"Self-hosted ({costs.engine} on {decision.pricing.gpu_label}): {usd(costs.usd_per_task)} per "
                     f"task at {costs.level} ({costs.sessions_alive:g} sessions alive), "
                     f"{costs.tasks_per_hour_per_gpu:,.1f} tasks an hour per GPU; {usd(costs.usd_per_m_tokens)} "
                     "per 1M of a task's tokens.")
    compared = next((p for p in costs.providers if decision.compared_to and p.id == decision.compared_to.id), None)
    if compared is not None:
        p = compared
        cross = (f"self-hosting is cheaper from {p.crossover_tasks:,.0f} tasks a month" if p.crossover_tasks
                 else f"no crossover: {p.crossover_reason}" if p.crossover_reason else "no crossover")
        lines.append(f"{p.id} (the cheapest host compared): {usd(p.usd_per_task)} per task, each call's input "
                     f"priced cached and uncached at the measured share; {cross}. Every host is in the table.")
    if costs.monthly_tasks and costs.self_usd_per_month is not None:
        api = f" against {usd(compared.monthly_usd)} at {compared.id}" if compared and compared.monthly_usd else ""
        lines.append(f"At {costs.monthly_tasks:,.0f} tasks a month: self-hosting {usd(costs.self_usd_per_month)} a "
                     f"month{api}.")
    return lines

