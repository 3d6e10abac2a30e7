"""A decision in the terminal (`bench report`, `bench cost`): its headline, the reasoning as bullets, the options
side by side with their crossovers, what it assumed, and its warnings. Display only: the decision is made in
costmodel."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

if TYPE_CHECKING:  # imported when used: `bench --help` stays quick
    from rich.console import Console

    from costmodel.types import Decision


def print_verdict(console: Console, decision: Decision) -> None:
    from bench.commands.tables import DataTable
    from common.units import tokens, usd
    from costmodel.prices import MAX_PRICE_AGE_DAYS

    console.print(f"[bold]{escape(decision.verdict.headline)}[/]", highlight=False)  # names from files: text
    _bullets(console, [*decision.verdict.lines, *_reasoning_lines(decision)])
    best = decision.best
    if best is not None:
        table = DataTable(show_lines=False)
        for name in ("option", "per month", "per 1M tokens", "crossover (self-hosting cheaper above)",
                     "break-even utilization"):
            # A narrow table breaks a long provider id over two lines rather than cutting it short.
            table.add_column(name, justify="left" if name.startswith(("option", "cross")) else "right",
                             overflow="fold")
        if best.fleet is not None:
            table.add_row(f"self-hosted: {best.fleet.gpus} GPUs", usd(best.fleet.monthly_usd, cents=True),
                          usd(best.fleet.monthly_usd / best.fleet.monthly_tokens * 1e6) if best.fleet.monthly_tokens
                          else "-", "", "")
        owned = decision.owned
        if owned is not None and owned.fleet is not None:
            fleet = owned.fleet
            where = (f"{tokens(owned.own_beats_provider_above)} tokens/month" if owned.own_beats_provider_above
                     else "none")
            table.add_row(f"owned: {fleet.servers} server(s), {fleet.gpus_used} GPUs",
                          usd(fleet.monthly_usd, cents=True), usd(fleet.monthly_usd / fleet.monthly_tokens * 1e6),
                          f"{where} (vs {owned.provider_id})", "")
        for p in sorted(best.providers, key=lambda p: (p.is_secondary, p.usd_per_request)):
            cross = p.crossover
            where = "-" if cross is None else (f"{tokens(cross.monthly_tokens)} tokens/month"
                                               if cross.monthly_tokens is not None else "none")
            even = p.break_even_utilization
            table.add_row(p.id + (" (reference)" if p.is_secondary else ""), usd(p.monthly_usd, cents=True),
                          usd(p.usd_per_m_tokens), where, "-" if even is None else f"{even:.0%}")
        console.print(table)
    console.print("Assumed:", highlight=False)
    for line in assumption_lines(decision):
        console.print(f"  {line}", highlight=False, markup=False)
    for text in dict.fromkeys([*decision.warnings, *(w for r in decision.results for w in r.warnings)]):
        console.print(f"[yellow]warning:[/] {escape(text)}", highlight=False)
    stale = decision.stale_prices
    if stale:
        console.print(f"[yellow]note:[/] {len(stale)} price(s) used are older than {MAX_PRICE_AGE_DAYS} days "
                      f"(oldest {escape(stale[0].id)}, {stale[0].retrieved}); pass your own with --prices",
                      highlight=False)


def _bullets(console: Console, lines: list[str]) -> None:
    """Lines as bullets whose wrapped lines hang under their text, not under the dash."""
    import textwrap

    for line in lines:
        console.print(textwrap.fill(line, max(console.width, 40), initial_indent="  - ", subsequent_indent="    "),
                      highlight=False, soft_wrap=True, markup=False)


def _reasoning_lines(decision: Decision) -> list[str]:
    """What the text otherwise leaves to the JSON: the cost per 1M output tokens at the operating point, and the
    three assumptions that move the monthly saving most."""
    from common.units import usd

    lines = []
    best = decision.best
    point = best.operating_point if best else None
    if best is not None and point is not None and point.output_tokens_per_s > 0:
        per_m_output = best.replica_usd_per_hour / (point.output_tokens_per_s * 3600) * 1e6
        lines.append(f"Self-hosted at the operating point: {usd(per_m_output)} per 1M output tokens (one replica "
                     f"busy at {point.output_tokens_per_s:,.0f} output tokens/s).")
    if decision.sensitivity is not None:
        drivers = decision.sensitivity.drivers()
        if drivers:
            lines.append("What moves the monthly saving most: " + "; ".join(
                f"{row.name} ({usd(low, True)} to {usd(high, True)})" for row, low, high in drivers)
                + " (saving = provider minus self-hosted, a month).")
    return lines


def assumption_lines(decision: Decision) -> list[str]:
    """What the answer rests on, in words: request lengths, traffic shape, fleet sizing, prices, operations."""
    from common.units import share, tokens, usd

    pricing, a = decision.pricing, decision.pricing.assumptions
    result = decision.best or (decision.results[0] if decision.results else None)
    lines = [f"requests: {result.isl:,.0f} input + {result.osl:,.0f} output tokens on average (ISL/OSL)"] \
        if result is not None else []
    assumed = " (assumed)" if any(t.startswith("peak-to-average") for t in pricing.assumed) else ""
    shape = "the hourly profile's" if a.hourly_profile else "given"
    volume = f"{tokens(pricing.monthly_tokens)} tokens/month, " if pricing.monthly_tokens is not None else ""
    lines.append(f"traffic: {volume}peak-to-average {a.peak_ratio:.3g}{assumed or f' ({shape})'}, "
                 f"{a.hours_of_operation:g} h/month of operation")
    lines.append(f"fleet: each replica planned at {share(a.headroom)} of its capacity ({share(1 - a.headroom)} "
                 "headroom), "
                 f"{a.spare_replicas} spare replica(s), {a.gpus_per_replica} GPU(s) per replica")
    lines.append(f"GPU: {pricing.gpu_label}, billed {a.billed_hours_per_month:g} h/month"
                 + (f"; chosen as {pricing.gpu_choice}" if pricing.gpu_choice else ""))
    batch = "batch API used where a row has a discount" if a.uses_batch_api else "no batch API"
    lines.append(f"providers: prompt-cache hit rate {share(a.cache_hit_rate)}, {batch}")
    ops = usd(a.ops_usd_per_month)
    lines.append(f"operations: {ops}/month" if a.ops_usd_per_month > 0 else
                 f"operations: {ops}/month: people's time to run the fleet is not counted (--ops-cost)")
    if decision.owned is not None:
        lines += [f"owned: {note}" for note in decision.owned.notes]
    return lines

