"""A tune's report: its configurations side by side, the best marked, the chart people expect (per-user speed
against throughput per GPU, one curve per configuration, the Pareto front across them), and the decision of
the best configuration's own run report. Laid out from the data `bench tune` gathers (tune.json beside it);
nothing here measures or decides."""

from __future__ import annotations

import base64
import itertools
import json
from pathlib import Path
from typing import Any

from reports.plots import SIZE, _colors, _png, plt
from reports.render import _template

PARETO_PNG = "pareto.png"


def pareto_plot(data: dict[str, Any]) -> bytes | None:
    """Output tokens/s per user (1000 / TPOT p50) against output tokens/s per GPU: a curve per configuration
    (its levels), the front no configuration beats on both."""
    configs = [c for c in data["configs"] if c["curve"]]
    if not configs:
        return None
    fig, ax = plt.subplots(figsize=SIZE)
    for config, color in zip(configs, itertools.cycle(_colors())):
        speed, rate = zip(*config["curve"], strict=True)
        best = config["name"] == data["best"]
        ax.plot(speed, rate, "o-", color=color, linewidth=2.4 if best else 1.2,
                label=config["name"] + (" (best)" if best else ""))
    front = data["pareto_front"]
    ax.plot([p["tokens_per_s_per_user"] for p in front], [p["tokens_per_s_per_gpu"] for p in front], "k--",
            linewidth=1, label="Pareto front")
    ax.set_xlabel("output tokens/s per user (1000 / TPOT p50)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def write_tune_report(data: dict[str, Any], out: Path) -> Path:
    """tune.html (self-contained), tune.md and tune-report.json beside it, and the chart as pareto.png."""
    png = pareto_plot(data)
    if png is not None:
        (out.parent / PARETO_PNG).write_bytes(png)
    out.with_name("tune-report.json").write_text(json.dumps(data, indent=2) + "\n")
    image = "data:image/png;base64," + base64.b64encode(png).decode() if png else None
    out.write_text(_template("tune.html.j2").render(d=data, image=image))
    out.with_suffix(".md").write_text(_template("tune.md.j2").render(d=data, image=PARETO_PNG if png else None))
    return out
