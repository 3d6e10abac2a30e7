"""A report's files from its input: report.html (self-contained: plots embedded, opens from disk), report.md,
report.json (every figure) and plots/*.png.

    write_report(report_input, out)   what `bench report` and a finished sweep call (through bench.flows.report)

The verdict comes first, for someone with ten seconds; then the plots, the tables, the method, the caveats
and where every number came from. Nothing here reads a run directory or computes a cost.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.units import share, tokens, usd
from reports.data import build_report_data
from reports.inputs import ReportInput

REPORT_NAME = "report.html"


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    markdown: Path
    json: Path
    plots: tuple[Path, ...]
    data: dict[str, Any]


def write_report(inp: ReportInput, out: Path) -> ReportFiles:
    """Write the report of `inp` to `out` (an .html path), with its Markdown, JSON and plots beside it."""
    screenshots = {f"ui-{i}": run.ui_screenshot for i, run in enumerate(inp.runs) if run.ui_screenshot}
    return _write(Path(out), build_report_data(inp), screenshots)


def _write(out: Path, data: dict[str, Any], screenshots: dict[str, bytes] | None = None) -> ReportFiles:
    from reports.plots import PLOTS, draw_all

    out.parent.mkdir(parents=True, exist_ok=True)
    plots_dir = out.parent / ("plots" if out.stem == "report" else f"{out.stem}-plots")
    plots_dir.mkdir(exist_ok=True)
    pngs = draw_all(data)
    paths = []
    for name, png in {**pngs, **(screenshots or {})}.items():  # screenshots beside the plots, for the Markdown
        (plots_dir / f"{name}.png").write_bytes(png)
        paths.append(plots_dir / f"{name}.png")
    data["plots"] = [{"name": name, "title": PLOTS[name][0], "file": f"{plots_dir.name}/{name}.png"}
                     for name in pngs]
    json_path, md_path = out.with_suffix(".json"), out.with_suffix(".md")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    every = {**pngs, **(screenshots or {})}
    images = {name: "data:image/png;base64," + base64.b64encode(png).decode() for name, png in every.items()}
    out.write_text(_template("report.html.j2").render(d=data, images=images))
    md_path.write_text(_template("report.md.j2").render(d=data, images={name: f"{plots_dir.name}/{name}.png"
                                                                       for name in every}))
    return ReportFiles(out, md_path, json_path, tuple(paths), data)


def _template(name: str) -> Any:
    """A template whose every `{{ value }}` is escaped for its page: HTML's by jinja2's autoescape, Markdown's by
    `markdown_text` (names and notes come from files and servers: a model called `<script>` stays text)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"),
                             autoescape=jinja2.select_autoescape(["html.j2"]), trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined,
                             finalize=markdown_text if name.endswith(".md.j2") else None)
    env.filters.update(usd=usd, tokens=tokens, pct=share, num=_num, ms=_ms, util=_utilization)
    return env.get_template(name)


_MARKDOWN = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "[": "\\[", "]": "\\]",
                           "\\": "\\\\", "`": "\\`", "\n": " ", "\r": " "})


def markdown_text(value: Any) -> Any:
    """A value as Markdown text that stays text: no raw HTML, no link or image, no code span, and in a table one
    cell (a `|` or a line break would end it). Numbers and None pass as they are."""
    return value.translate(_MARKDOWN) if isinstance(value, str) else value


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _utilization(value: float | None) -> str:
    """Break-even utilization: a share up to 100 %, beyond it a multiple that can never be reached."""
    if value is None:
        return "-"
    return f"{value:.0%}" if value <= 1 else f"{value:,.1f}x (never)"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"

