"""Run directories -> report.html (self-contained: plots embedded, opens from disk), report.md, report.json.

    render_report(run_dirs, out, settings=..., prices=...)   what `bench report` calls
    render_run_report(run_dir)                              what a sweep calls when it ends

The verdict comes first, for someone with ten seconds; then the plots, the tables, the method, the caveats
and where every number came from.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from costmodel.decide import Decision, EngineLevels, decide
from costmodel.inputs import DecisionSettings
from costmodel.model import level_from_summary
from costmodel.prices import PriceError, load_catalog
from costmodel.units import share, tokens, usd
from reports.data import build_report_data
from reports.runs import ReportError, RunReport, load_runs, settings_from_run

REPORT_NAME = "report.html"


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    markdown: Path
    json: Path
    plots: tuple[Path, ...]
    decision: Decision
    data: dict[str, Any]


def render_report(run_dirs: Sequence[Path], out: Path | None = None, *, settings: DecisionSettings | None = None,
                  prices: Sequence[Path] = (), today: date | None = None) -> ReportFiles:
    """Write the report for `run_dirs`. `settings` default to the scenario recorded in the first run.

    Raises ReportError (nothing measured, a bad setting) or costmodel.prices.PriceError (a bad price file or
    name); both carry a message meant for the user."""
    run_dirs = [Path(d) for d in run_dirs]
    if not run_dirs:
        raise ReportError("give at least one run directory")
    if settings is None:
        settings = settings_from_run(run_dirs[0]) if (run_dirs[0] / "run.json").is_file() else DecisionSettings()
    runs, skipped = load_runs(run_dirs, settings.slo)
    catalog = load_catalog(prices)
    engines = [EngineLevels(run.label, tuple(level_from_summary(s) for s in run.measured)) for run in runs]
    decision = decide(engines, settings.slo, settings.traffic, settings.pricing, settings.requirements, catalog,
                      today or date.today())
    data = build_report_data(decision, runs, skipped, settings, catalog.origins, datetime.now(timezone.utc))
    out = Path(out) if out is not None else (run_dirs[0] / REPORT_NAME if len(run_dirs) == 1 else Path(REPORT_NAME))
    return _write(out, data, decision, runs)


def render_run_report(run_dir: Path) -> Path | None:
    """The report of one finished (or interrupted) sweep, next to its records: `<run_dir>/report.html`.

    None when the run measured nothing. Raises ReportError / PriceError when the scenario's pricing can't
    be used (e.g. no GPU named); a sweep should print that message and carry on."""
    try:
        return render_report([Path(run_dir)], Path(run_dir) / REPORT_NAME).html
    except ReportError as exc:
        if str(exc).startswith("nothing to report"):
            return None
        raise


def _write(out: Path, data: dict[str, Any], decision: Decision, runs: list[RunReport]) -> ReportFiles:
    from reports.plots import PLOTS, draw_all

    out.parent.mkdir(parents=True, exist_ok=True)
    plots_dir = out.parent / ("plots" if out.stem == "report" else f"{out.stem}-plots")
    plots_dir.mkdir(exist_ok=True)
    pngs = draw_all(data)
    paths = []
    for name, png in pngs.items():
        (plots_dir / f"{name}.png").write_bytes(png)
        paths.append(plots_dir / f"{name}.png")
    data["plots"] = [{"name": name, "title": PLOTS[name][0], "file": f"{plots_dir.name}/{name}.png"}
                     for name in pngs]
    json_path, md_path = out.with_suffix(".json"), out.with_suffix(".md")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    images = {name: "data:image/png;base64," + base64.b64encode(png).decode() for name, png in pngs.items()}
    out.write_text(_template("report.html.j2").render(d=data, images=images))
    md_path.write_text(_template("report.md.j2").render(d=data, images={p["name"]: p["file"] for p in data["plots"]}))
    return ReportFiles(out, md_path, json_path, tuple(paths), decision, data)


def _template(name: str) -> Any:
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"),
                             autoescape=jinja2.select_autoescape(["html.j2"]), trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(usd=usd, tokens=tokens, pct=share, num=_num, ms=_ms, util=_utilization)
    return env.get_template(name)


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _utilization(value: float | None) -> str:
    """Break-even utilization: a share up to 100 %, beyond it a multiple that can never be reached."""
    if value is None:
        return "-"
    return f"{value:.0%}" if value <= 1 else f"{value:,.1f}x (never)"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


__all__ = ["PriceError", "ReportError", "ReportFiles", "render_report", "render_run_report"]
