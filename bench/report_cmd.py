"""`bench report` and `bench cost`: thin shells over `bench.report.render_report` and
`costmodel.decide.decide_given`. Heavy imports (matplotlib, jinja2, numpy) happen inside the commands, so
`bench --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

GPU_HELP = ("GPU name (h100-sxm, h100-pcie, h200, a100-80gb, l40s, l4, a10g, rtx-4090: the catalog's median "
            "on-demand price) or a price row id such as lambda/h100-sxm/on-demand.")
PROVIDER_HELP = ("Provider price row (together/llama-3.1-8b) or model id (llama-3.1-8b: every host of it); "
                 "repeat the flag or separate with commas.")


def report(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories written by `bench sweep` (one per engine)."),
    scenario: str = typer.Option(None, help="Scenario (file or shipped name) whose SLO, traffic, pricing and "
                                            "requirements to use; default: the one the first run was measured with."),
    gpu: str = typer.Option(None, help=GPU_HELP),
    gpu_price: float = typer.Option(None, min=0, help="Your own GPU price, USD per GPU-hour (wins over --gpu's)."),
    gpus_per_replica: int = typer.Option(None, min=1, help="GPUs one engine replica runs on."),
    provider: list[str] = typer.Option(None, help=PROVIDER_HELP),
    monthly_tokens: float = typer.Option(None, min=0, help="Input + output tokens per month, e.g. 3e9."),
    prices: list[Path] = typer.Option(None, help="Your own price YAML: adds rows, or replaces rows with the same id."),
    out: Path = typer.Option(None, help="The HTML report to write (report.md, report.json and plots/ beside it); "
                                        "default RUN_DIR/report.html for one run, ./report.html for several."),
) -> None:
    """Decide from measured runs: self-host or pay per token. Writes HTML, Markdown and JSON."""
    from bench.console import console, fail
    from bench.report import ReportError, render_report
    from costmodel.prices import PriceError

    try:
        settings = _settings(scenario, run_dirs[0]).with_overrides(
            gpu=gpu, gpu_usd_per_hour=gpu_price, gpus_per_replica=gpus_per_replica, providers=_names(provider),
            monthly_tokens=monthly_tokens)
        result = render_report(run_dirs, out, settings=settings, prices=prices or [])
    except (ReportError, PriceError, ValueError) as exc:
        fail(_message(exc))
    except OSError as exc:
        fail(f"cannot write the report{f' to --out {out}' if out else ''}: {exc}")
    files = result.files
    _print_verdict(console, result.decision)
    console.print(f"report: {files.html}  (and {files.markdown.name}, {files.json.name}, "
                  f"{len(files.plots)} plots in {files.plots[0].parent.name + '/' if files.plots else '-'})")


def cost(
    throughput: float = typer.Option(..., min=0, help="Output tokens/s ONE replica sustains within your SLO "
                                                      "(from a sweep's operating point; not a saturated peak)."),
    input_tokens: float = typer.Option(None, min=0, help="Mean input tokens per request (default: the scenario's)."),
    output_tokens: float = typer.Option(None, min=1, help="Mean output tokens per request (default: the scenario's)."),
    scenario: str = typer.Option("chat", help="Scenario whose traffic, pricing and requirements are the defaults."),
    gpu: str = typer.Option(None, help=GPU_HELP),
    gpu_price: float = typer.Option(None, min=0, help="Your own GPU price, USD per GPU-hour."),
    gpus_per_replica: int = typer.Option(None, min=1, help="GPUs one replica runs on."),
    provider: list[str] = typer.Option(None, help=PROVIDER_HELP),
    monthly_tokens: float = typer.Option(None, min=0, help="Input + output tokens per month, e.g. 3e9."),
    peak_to_average: float = typer.Option(None, min=1, help="Busiest hour's traffic over the average."),
    hours: float = typer.Option(None, min=1, max=744, help="Hours of operation per month (730 = always on)."),
    ops_cost: float = typer.Option(None, min=0, help="Operations cost (people's time), USD per month."),
    prices: list[Path] = typer.Option(None, help="Your own price YAML: adds rows, or replaces rows with the same id."),
    json_output: bool = typer.Option(False, "--json", help="Print every figure as JSON instead of the summary."),
) -> None:
    """The same answer from numbers typed in: throughput, prices, traffic. No run needed."""
    import json
    from datetime import date

    from bench.console import console, fail
    from bench.scenario import ScenarioError, load_scenario
    from costmodel.decide import decide_given
    from costmodel.prices import PriceError, load_catalog
    from reports.data import jsonable

    try:
        base = load_scenario(scenario)
        settings = base.decision_settings().with_overrides(
            gpu=gpu, gpu_usd_per_hour=gpu_price, gpus_per_replica=gpus_per_replica, providers=_names(provider),
            monthly_tokens=monthly_tokens, peak_to_average=peak_to_average, hours_per_month=hours,
            ops_usd_per_month=ops_cost)
        isl = input_tokens if input_tokens is not None else base.workload.input_tokens.mean_tokens()
        osl = output_tokens if output_tokens is not None else base.workload.output_tokens.mean_tokens()
        decision = decide_given(throughput, isl, osl, settings.traffic, settings.pricing, settings.requirements,
                                load_catalog(prices or []), date.today())
    except (ScenarioError, PriceError, ValueError) as exc:
        fail(_message(exc))
    if json_output:
        print(json.dumps(jsonable(decision), indent=2))
        return
    _print_verdict(console, decision)


def _settings(scenario: str | None, first_run: Path) -> Any:
    from bench.report import ReportError, settings_from_run
    from bench.scenario import ScenarioError, load_scenario

    if scenario is None:
        return settings_from_run(first_run)
    try:
        return load_scenario(scenario).decision_settings()
    except ScenarioError as exc:
        raise ReportError(str(exc)) from None


def _names(values: list[str] | None) -> list[str]:
    return [part.strip() for value in values or [] for part in value.split(",") if part.strip()]


def _message(exc: Exception) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        from common.validation import describe_validation_error

        return f"bad flag: {describe_validation_error(exc)}"
    return str(exc)


def _print_verdict(console: Any, decision: Any) -> None:
    from rich.table import Table

    from common.units import tokens, usd

    console.print(f"[bold]{decision.verdict.headline}[/]", highlight=False)
    for line in decision.verdict.lines:
        console.print(f"  - {line}", highlight=False)
    best = decision.best
    if best is not None:
        table = Table(show_lines=False)
        for name in ("option", "per month", "per 1M tokens", "crossover (self-hosting cheaper above)"):
            table.add_column(name, justify="left" if name.startswith(("option", "cross")) else "right")
        if best.fleet is not None:
            table.add_row(f"self-hosted: {best.fleet.gpus} GPUs", usd(best.fleet.monthly_usd, cents=True),
                          usd(best.fleet.monthly_usd / best.fleet.monthly_tokens * 1e6) if best.fleet.monthly_tokens
                          else "-", "")
        for p in sorted(best.providers, key=lambda p: (p.is_secondary, p.usd_per_request)):
            cross = p.crossover
            where = "-" if cross is None else (f"{tokens(cross.monthly_tokens)} tokens/month"
                                               if cross.monthly_tokens is not None else "none")
            table.add_row(p.id + (" (reference)" if p.is_secondary else ""), usd(p.monthly_usd, cents=True),
                          usd(p.usd_per_m_tokens), where)
        console.print(table)
    stale = decision.stale_prices
    if stale:
        console.print(f"[yellow]note:[/] {len(stale)} price(s) used are older than 90 days (oldest "
                      f"{stale[0].id}, {stale[0].retrieved}); pass your own with --prices", highlight=False)
