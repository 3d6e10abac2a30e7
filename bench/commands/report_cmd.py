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
from bench.commands.verdict_display import print_verdict
from bench.inputs.flag_text import key_value, listed

if TYPE_CHECKING:  # imported when used: `bench --help` stays quick
    from bench.inputs.scenario import DecisionSettings

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
    min_validity: float = typer.Option(None, min=0, max=1, metavar="FRACTION",
                                       help="The least share of shaped answers (a workload's `structured`: JSON, a "
                                            "schema, tool calls) that are valid: an option whose 95 % interval lies "
                                            "below it can't win, e.g. 0.99."),
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
            gpu=gpu, gpu_usd_per_hour=gpu_price, gpus_per_replica=gpus_per_replica, providers=listed(*provider or []),
            monthly_tokens=monthly_tokens, monthly_tasks=monthly_tasks, min_accuracy=min_accuracy,
            min_validity=min_validity)
        result = render_report(run_dirs, out, settings=settings, prices=prices or [], today=_as_of(as_of))
    except (ReportError, PriceError, ValueError) as exc:
        fail(_message(exc))
    except OSError as exc:
        fail(f"cannot write the report{f' to --out {out}' if out else ''}: {exc}")
    files = result.files
    print_verdict(console, result.decision)
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
            gpu=gpu, gpu_usd_per_hour=gpu_price, gpus_per_replica=gpus_per_replica, providers=listed(*provider or []),
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
    print_verdict(console, decision)
    if finetunes is not None:
        from bench.commands.tables import finetunes_table

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
        key, text = key_value(value)
        if not key or not text:
            raise ValueError(f"{flag} {value}: expected KEY=VALUE, e.g. {flag} server_usd=250000")
        pairs[key] = text
    return pairs


def _owned_fields(values: list[str] | None) -> dict[str, str]:
    from costmodel.inputs import Owned

    fields = _pairs(values, "--owned")
    unknown = sorted(set(fields) - set(Owned.model_fields))
    if unknown:
        raise ValueError(f"--owned {unknown[0]}: unknown field; known: {', '.join(Owned.model_fields)}")
    return fields


def _message(exc: Exception) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        from common.validation import describe_validation_error

        return f"bad flag: {describe_validation_error(exc)}"
    return str(exc)
