"""`bench report` and `bench cost`: thin shells over `bench.flows.report.render_report` and
`costmodel.decide.decide_given`. Heavy imports (matplotlib, jinja2, numpy) happen inside the commands, so
`bench --help` stays fast.
"""

from __future__ import annotations

import enum
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from bench.commands.helptext import ADVANCED, LOAD, OUTPUT, WORKLOAD, BenchCommand, examples

if TYPE_CHECKING:  # imported when used: `bench --help` stays quick
    from rich.console import Console

    from bench.inputs.scenario import DecisionSettings
    from costmodel.types import Decision

GPU_HELP = ("GPU name (the catalog's median price of that kind; `bench cost --help` lists the names it can price "
            "today) or a price row id such as gcp/l4/on-demand.")
OWNED_HELP = ("Compare owning the hardware too (repeatable; over the scenario's pricing.owned): server_usd, "
              "amortization_years and usd_per_kwh are needed; gpus_per_server (default 8), residual_share (0), "
              "hosting_usd_per_server_month (0), power_w_per_gpu (measured, else the GPU's board power), "
              "server_overhead_w (0), pue (1.3), cost_of_capital (0, a year), maintenance_share_per_year (0).")
PROVIDER_HELP = ("Provider price row (together/llama-3.1-8b) or model id (llama-3.1-8b: every host of it); "
                 "repeat the flag or separate with commas.")


class GpuPricing(str, enum.Enum):
    """How a GPU is rented (costmodel.inputs.PricingKind, spelled out here so `bench --help` stays light)."""

    ON_DEMAND = "on-demand"
    SPOT = "spot"
    RESERVED = "reserved"
    RESERVED_1Y = "reserved-1y"
    RESERVED_3Y = "reserved-3y"
    SERVERLESS = "serverless"


REPORT_EXAMPLES = examples("bench report runs/RUN_DIR --gpu h100-sxm --monthly-tokens 3e9",
                           "bench report runs/RUN_A runs/RUN_B --provider llama-3.1-8b --out report.html",
                           "bench report runs/RUN_DIR --gpu-price 2.5 --prices my-prices.yaml")
COST_EXAMPLES = examples("bench cost --throughput 2400 --gpu h100-sxm --monthly-tokens 3e9",
                         "bench cost --throughput 2400 --provider llama-3.1-8b --adapters 16",
                         "bench cost --throughput 2400 --gpu h100-sxm --gpu-pricing spot --json")


class CostHelpCommand(BenchCommand):
    """`bench cost --help` names the GPUs the shipped catalog prices today, kind by kind (a row ages out of
    the defaults after a year), read when the help is asked for."""

    def format_help(self, ctx: Any, formatter: Any) -> None:  # click's signature
        for param in self.params:
            if param.name == "gpu":
                param.help = escape(gpu_help())  # type: ignore[attr-defined]
        super().format_help(ctx, formatter)


def gpu_help() -> str:

    from costmodel.prices import load_catalog

    kinds = load_catalog().as_of(date.today()).priceable()
    listed = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in kinds.items())
    return (f"GPU name, priced at the catalog's median row of --gpu-pricing's kind ({listed}), or a price row id "
            "such as gcp/l4/on-demand.")


AS_OF_HELP = ("Judge the prices as on this day, YYYY-MM-DD (default: today): which rows are current and which "
              "stale, to reproduce an earlier decision.")


def _as_of(day: datetime | None) -> date:
    return day.date() if day is not None else date.today()


def _headroom(value: float | None) -> float | None:
    if value is not None and not 0 < value <= 1:
        raise typer.BadParameter(f"{value:g} is not in the range 0<x<=1.")
    return value


def report(
    run_dirs: list[Path] = typer.Argument(..., metavar="RUN_DIR",
                                          help="Run directories written by `bench sweep` (one per engine)."),
    scenario: str = typer.Option(None, metavar="NAME|FILE",
                                 help="Scenario (file or shipped name) whose SLO, traffic, pricing and requirements "
                                      "to use; default: the one the first run was measured with."),
    gpu: str = typer.Option(None, metavar="NAME|ROW", help=GPU_HELP),
    gpu_price: float = typer.Option(None, min=0, metavar="USD",
                                    help="Your own GPU price, USD per GPU-hour (wins over --gpu's)."),
    gpus_per_replica: int = typer.Option(None, min=1, metavar="N", help="GPUs one engine replica runs on."),
    provider: list[str] = typer.Option(None, metavar="ROW|MODEL", help=PROVIDER_HELP),
    monthly_tokens: float = typer.Option(None, min=0, metavar="N", rich_help_panel=WORKLOAD,
                                         help="Input + output tokens per month, e.g. 3e9."),
    monthly_tasks: float = typer.Option(None, min=0, metavar="N", rich_help_panel=WORKLOAD,
                                        help="Agent sessions: tasks (sessions) per month, e.g. 2e5."),
    min_accuracy: float = typer.Option(None, min=0, max=1, metavar="FRACTION",
                                       help="The least share of the eval answered right (`bench quality`): an option "
                                            "whose 95 % interval lies below it can't win, e.g. 0.6."),
    prices: list[Path] = typer.Option(None, metavar="FILE", rich_help_panel=ADVANCED,
                                      help="Your own price YAML: adds rows, or replaces rows with the same id."),
    as_of: datetime = typer.Option(None, "--as-of", formats=["%Y-%m-%d"], metavar="DATE", rich_help_panel=ADVANCED,
                                   help=AS_OF_HELP),
    out: Path = typer.Option(None, metavar="FILE", rich_help_panel=OUTPUT,
                             help="The HTML report to write (report.md, report.json and plots/ beside it); default "
                                  "RUN_DIR/report.html for one run, ./report.html for several."),
) -> None:
    """Decide from measured runs whether to self-host or pay per token.

    Writes the report in HTML, Markdown and JSON, with its plots."""
    from bench.commands.console import console, fail
    from bench.flows.report import ReportError, render_report
    from costmodel.prices import PriceError

    try:
        settings = _settings(scenario, run_dirs[0]).with_overrides(
            gpu=gpu, gpu_usd_per_hour=gpu_price, gpus_per_replica=gpus_per_replica, providers=_names(provider),
            monthly_tokens=monthly_tokens, monthly_tasks=monthly_tasks, min_accuracy=min_accuracy)
        result = render_report(run_dirs, out, settings=settings, prices=prices or [], today=_as_of(as_of))
    except (ReportError, PriceError, ValueError) as exc:
        fail(_message(exc))
    except OSError as exc:
        fail(f"cannot write the report{f' to --out {out}' if out else ''}: {exc}")
    files = result.files
    _print_verdict(console, result.decision)
    console.print(f"report: {files.html}  (and {files.markdown.name}, {files.json.name}, "
                  f"{len(files.plots)} plots in {files.plots[0].parent.name + '/' if files.plots else '-'})")


def cost(
    throughput: float = typer.Option(..., min=0, metavar="TOK/S",
                                     help="Output tokens/s ONE replica sustains within your SLO (a sweep's "
                                          "operating point, not a saturated peak)."),
    input_tokens: float = typer.Option(None, min=0, metavar="N",
                                       help="Mean input tokens per request, ISL (default: the scenario's)."),
    output_tokens: float = typer.Option(None, min=1, metavar="N",
                                        help="Mean output tokens per request, OSL (default: the scenario's)."),
    scenario: str = typer.Option("chat", metavar="NAME|FILE",
                                 help="Scenario whose traffic, pricing and requirements are the defaults."),
    gpu: str = typer.Option(None, metavar="NAME|ROW", help=GPU_HELP),
    gpu_price: float = typer.Option(None, min=0, metavar="USD", help="Your own GPU price, USD per GPU-hour."),
    gpu_pricing: GpuPricing = typer.Option(None, metavar="KIND",
                                           help="How the GPU is rented: on-demand, spot, reserved, reserved-1y, "
                                                "reserved-3y or serverless. Reserved kinds bill all 730 h a month, "
                                                "serverless only the hours used."),
    gpus_per_replica: int = typer.Option(None, min=1, max=64, metavar="N", help="GPUs one replica runs on."),
    provider: list[str] = typer.Option(None, metavar="ROW|MODEL", help=PROVIDER_HELP),
    monthly_tokens: float = typer.Option(None, min=0, metavar="N", rich_help_panel=WORKLOAD,
                                         help="Input + output tokens per month, e.g. 3e9."),
    peak_to_average: float = typer.Option(None, min=1, metavar="RATIO", rich_help_panel=WORKLOAD,
                                          help="Busiest hour's traffic over the average."),
    hours: float = typer.Option(None, min=1, max=744, metavar="HOURS", rich_help_panel=WORKLOAD,
                                help="Hours of operation per month (730 = always on)."),
    headroom: float = typer.Option(None, callback=_headroom, metavar="FRACTION", rich_help_panel=LOAD,
                                   help="Share of its throughput each replica is planned for, 0<x<=1 (default: the "
                                        "scenario's)."),
    spare_replicas: int = typer.Option(None, min=0, max=100, metavar="N", rich_help_panel=LOAD,
                                       help="Replicas kept on beyond the peak."),
    cache_hit_rate: float = typer.Option(None, min=0, max=1, metavar="FRACTION", rich_help_panel=WORKLOAD,
                                         help="Share of input tokens a provider bills at its cached price."),
    batch_api: bool = typer.Option(None, "--batch-api/--no-batch-api", show_default=False, rich_help_panel=WORKLOAD,
                                   help="Traffic can wait for a provider's batch API (its discount)."),
    ops_cost: float = typer.Option(None, min=0, metavar="USD", rich_help_panel=ADVANCED,
                                   help="Operations cost (people's time), USD a month."),
    prices: list[Path] = typer.Option(None, metavar="FILE", rich_help_panel=ADVANCED,
                                      help="Your own price YAML: adds rows, or replaces rows of the same id."),
    as_of: datetime = typer.Option(None, "--as-of", formats=["%Y-%m-%d"], metavar="DATE", rich_help_panel=ADVANCED,
                                   help=AS_OF_HELP),
    owned: list[str] = typer.Option(None, metavar="KEY=VALUE", rich_help_panel=ADVANCED, help=OWNED_HELP),
    precision: str = typer.Option(None, metavar="DTYPE",
                                  help="The precision the self-hosted weights run in (bf16, fp8, int4...): a "
                                       "compared host that serves another is named."),
    adapters: int = typer.Option(None, min=1, metavar="N",
                                 help="N LoRA fine-tunes of the model: self-hosted together (the throughput "
                                      "measured with them), each host's serverless LoRA, or N dedicated "
                                      "deployments; the crossover in tokens and in adapters."),
    json_output: bool = typer.Option(False, "--json", rich_help_panel=OUTPUT,
                                     help="Print every figure as JSON instead of the summary."),
) -> None:
    """Decide from numbers typed in (throughput, prices, traffic), with no run needed."""
    import json

    from bench.commands.console import console, fail
    from bench.inputs.scenario import ScenarioError, load_scenario
    from costmodel.decide import decide_given
    from costmodel.prices import PriceError, load_catalog
    from reports.data import jsonable

    try:
        base = load_scenario(scenario)
        settings = base.decision_settings().with_overrides(
            gpu=gpu, gpu_usd_per_hour=gpu_price, gpus_per_replica=gpus_per_replica, providers=_names(provider),
            monthly_tokens=monthly_tokens, peak_to_average=peak_to_average, hours_per_month=hours,
            ops_usd_per_month=ops_cost, gpu_pricing=gpu_pricing.value if gpu_pricing else None, headroom=headroom,
            spare_replicas=spare_replicas, cache_hit_rate=cache_hit_rate, uses_batch_api=batch_api,
            owned=_owned_fields(owned))
        isl = input_tokens if input_tokens is not None else base.workload.input_tokens.mean_tokens()
        osl = output_tokens if output_tokens is not None else base.workload.output_tokens.mean_tokens()
        catalog = load_catalog(prices or [])
        decision = decide_given(throughput, isl, osl, settings.traffic, settings.pricing, settings.requirements,
                                catalog, _as_of(as_of), precision=precision)
    except (ScenarioError, PriceError, ValueError) as exc:
        fail(_message(exc))
    finetunes = None
    if adapters is not None:
        from costmodel.finetunes import decide_finetunes

        finetunes = decide_finetunes(decision, adapters, catalog.finetunes)
        if finetunes is None:
            fail("--adapters: the fine-tunes need an operating point and an open model's host to price against "
                 "(--provider MODEL)")
    if json_output:
        print(json.dumps({**jsonable(decision), "finetunes": jsonable(finetunes)} if finetunes else
                         jsonable(decision), indent=2))
        return
    _print_verdict(console, decision)
    if finetunes is not None:
        from bench.commands.display import finetunes_table

        console.print(finetunes_table(finetunes))
        for line in finetunes.lines:
            console.print(line, highlight=False)


def _settings(scenario: str | None, first_run: Path) -> DecisionSettings:
    from bench.flows.report import ReportError, settings_from_run
    from bench.inputs.scenario import ScenarioError, load_scenario

    if scenario is None:
        return settings_from_run(first_run)
    try:
        return load_scenario(scenario).decision_settings()
    except ScenarioError as exc:
        raise ReportError(str(exc)) from None


def _pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    """`KEY=VALUE` flags as a mapping (the values are checked where they are used, by name)."""
    pairs = {}
    for value in values or []:
        key, sep, text = value.partition("=")
        if not sep or not key.strip() or not text.strip():
            raise ValueError(f"{flag} {value}: expected KEY=VALUE, e.g. {flag} server_usd=250000")
        pairs[key.strip()] = text.strip()
    return pairs


def _owned_fields(values: list[str] | None) -> dict[str, str]:
    from costmodel.inputs import Owned

    fields = _pairs(values, "--owned")
    unknown = sorted(set(fields) - set(Owned.model_fields))
    if unknown:
        raise ValueError(f"--owned {unknown[0]}: unknown field; known: {', '.join(Owned.model_fields)}")
    return fields


def _names(values: list[str] | None) -> list[str]:
    return [part.strip() for value in values or [] for part in value.split(",") if part.strip()]


def _message(exc: Exception) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        from common.validation import describe_validation_error

        return f"bad flag: {describe_validation_error(exc)}"
    return str(exc)


def _print_verdict(console: Console, decision: Decision) -> None:
    from rich.markup import escape

    from bench.commands.display import DataTable
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
