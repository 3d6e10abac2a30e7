"""`bench history`'s page: each configuration's trend at each level, plotted, with the newest run's verdict.

One self-contained `history.html` (plots embedded), beside the database in the runs folder, laid out by
reports/templates/history.html.j2. Every name on it (engine, model, run) is escaped: it may have come from another
tool's file.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from pathlib import Path

import jinja2

from bench.run.history import METRICS, Trend

# Autoescaped: a label holds a model name from an imported file, which may be `<script>...`.
PAGE = jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"),
                          autoescape=True).get_template("history.html.j2")


def write_history_page(trends: Sequence[Trend], metric: str, path: Path) -> Path:
    path.write_text(PAGE.render(metric=metric, items=[(t, _plot(t)) for t in trends]))
    return path


def _plot(trend: Trend) -> str:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 2.6))
    xs = list(range(1, len(trend.points) + 1))
    axes.plot(xs, [p.value for p in trend.points], marker="o")
    for x, point in zip(xs, trend.points, strict=True):
        if len(point.values) > 1:
            axes.scatter([x] * len(point.values), point.values, s=8, color="grey")
    if trend.interval is not None:
        axes.axhspan(*trend.interval, color="tab:blue", alpha=0.12, label="expected (95 %)")
        axes.legend(loc="best", fontsize=8)
    axes.set_xlabel("run (in time order)")
    axes.set_ylabel(trend.metric + ("" if METRICS[trend.metric][1] else " (lower is better)"))
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()
