"""The report's plots, drawn from the report's own data (report.json), so a plot never shows a number the
JSON does not hold. matplotlib with the Agg backend; each plot comes back as PNG bytes.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

DPI = 110
SIZE = (8.0, 4.2)
PERCENTILES = (("p50", ":"), ("p95", "-"), ("p99", "--"))


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    return buffer.getvalue()


def _colors() -> list[str]:
    return [c["color"] for c in plt.rcParams["axes.prop_cycle"]]


def _money(value: float, _: object = None) -> str:
    if value >= 1e6:
        return f"${value / 1e6:,.1f}M"
    if value >= 1e3:
        return f"${value / 1e3:,.0f}k"
    return f"${value:,.2f}" if value < 10 else f"${value:,.0f}"


def _volume(value: float, _: object = None) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def _load_axis(ax: Axes, engines: list[dict[str, Any]]) -> None:
    loads = [lv["load"] for e in engines for lv in e["levels"] if lv["kind"] == e["kind"]]
    if loads and min(loads) > 0 and max(loads) / min(loads) >= 8:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    kind = engines[0]["kind"] if engines else "concurrency"
    ax.set_xlabel({"concurrency": "concurrent users", "rate": "offered load (requests/s)"}.get(
        kind, "trace time scale (lower: faster)"))
    ax.grid(True, alpha=0.3)


def _levels(engine: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per level (a repeated level's first repeat), in load order."""
    first = {}
    for lv in engine["levels"]:
        if lv["kind"] == engine["kind"]:
            first.setdefault(lv.get("base_level", lv["label"]), lv)
    return sorted(first.values(), key=lambda lv: lv["load"])


def _figure(engine: dict[str, Any], lv: dict[str, Any], name: str, value: float | None) -> tuple[float | None, float]:
    """A figure of a level and the half-width of its 95 % interval: the repeats' mean where it was repeated."""
    repeated = next((r for r in engine.get("repeats", []) if r["label"] == lv.get("base_level")), None)
    if repeated is None:
        return value, 0.0
    f = repeated["figures"][name]
    return f["mean"], (f["high"] - f["low"]) / 2


def throughput_plot(data: dict[str, Any]) -> bytes:
    fig, ax = plt.subplots(figsize=SIZE)
    for engine, color in zip(data["engines"], _colors(), strict=False):
        levels = _levels(engine)
        figures = [_figure(engine, lv, "output_tokens_per_s", lv["output_tokens_per_s"]) for lv in levels]
        repeated = bool(engine.get("repeats"))
        ax.errorbar([lv["load"] for lv in levels], [f[0] for f in figures], yerr=[f[1] for f in figures] if repeated
                    else None, fmt="o-", color=color, capsize=4,
                    label=engine["engine"] + (" (mean of repeats, 95 % interval)" if repeated else ""))
        if repeated:
            every = [lv for lv in engine["levels"] if lv["kind"] == engine["kind"]]
            ax.plot([lv["load"] for lv in every], [lv["output_tokens_per_s"] for lv in every], ".", color=color,
                    alpha=0.4, label=f"{engine['engine']}: each repeat")
        point = engine["operating_point"]
        if point:
            ax.plot([point["load"]], [point["output_tokens_per_s"]], "*", ms=16, color=color, mec="black",
                    label=f"{engine['engine']}: highest load within the SLO")
    _load_axis(ax, data["engines"])
    ax.set_ylabel("output tokens/s (one replica)")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput vs load")
    ax.legend(fontsize=8)
    return _png(fig)


def latency_plot(data: dict[str, Any]) -> bytes:
    fig, axes = plt.subplots(1, 2, figsize=(SIZE[0] * 1.25, SIZE[1]))
    slo = data["inputs"]["settings"]["slo"]
    panels = (("ttft_ms", "TTFT (ms)", slo.get("ttft_ms")), ("itl_ms", "ITL and TPOT (ms)", slo.get("tpot_ms")))
    for ax, (key, title, limit) in zip(axes, panels, strict=True):
        for engine, color in zip(data["engines"], _colors(), strict=False):
            levels = [lv for lv in _levels(engine) if lv[key]["p50"] is not None]
            for stat, style in PERCENTILES:
                figures = [_figure(engine, lv, f"{key}_{stat}", lv[key][stat]) if stat in ("p50", "p95")
                           else (lv[key][stat], 0.0) for lv in levels]
                ax.errorbar([lv["load"] for lv in levels], [f[0] for f in figures], yerr=[f[1] for f in figures],
                            fmt=style, marker="o", ms=3, color=color, capsize=3, label=f"{engine['engine']} {stat}")
            if key == "itl_ms":  # the SLO is on TPOT (per request), which the operating point is judged by
                tpot = [lv for lv in levels if lv["tpot_ms"]["p95"] is not None]
                figures = [_figure(engine, lv, "tpot_ms_p95", lv["tpot_ms"]["p95"]) for lv in tpot]
                ax.errorbar([lv["load"] for lv in tpot], [f[0] for f in figures], yerr=[f[1] for f in figures],
                            fmt="-.", marker="s", ms=3, color=color, capsize=3, label=f"{engine['engine']} TPOT p95")
        if limit:
            label = "SLO (TTFT)" if key == "ttft_ms" else "SLO (TPOT, per-token target)"
            ax.axhline(limit, color="red", lw=1.5, label=label)
        _load_axis(ax, data["engines"])
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    return _png(fig)


def cost_per_token_plot(data: dict[str, Any]) -> bytes:
    fig, ax = plt.subplots(figsize=SIZE)
    for engine, color in zip(data["engines"], _colors(), strict=False):
        levels = [lv for lv in _levels(engine) if lv["cost"] and lv["cost"]["usd_per_m_total_tokens"] is not None]
        ax.plot([lv["load"] for lv in levels], [lv["cost"]["usd_per_m_total_tokens"] for lv in levels], "o-",
                color=color, lw=2, label=f"self-hosted, {engine['engine']} (fully busy)")
        point = engine["operating_point"]
        if point and point["request_per_s"] > 0 and engine["isl"] + engine["osl"] > 0:
            tokens_per_s = point["request_per_s"] * (engine["isl"] + engine["osl"])
            at_point = engine["replica_usd_per_hour"] * 1e6 / (3600 * tokens_per_s)
            ax.plot([point["load"]], [at_point], "*", ms=16, color=color, mec="black",
                    label=f"{engine['engine']}: at the operating point {_money(at_point)}")
        missed = [lv for lv in levels if not lv["meets_slo"]]
        if missed:
            ax.plot([lv["load"] for lv in missed], [lv["cost"]["usd_per_m_total_tokens"] for lv in missed], "x",
                    color="red", ms=10, mew=2, label=f"{engine['engine']}: misses the SLO")
    best = next((e for e in data["engines"] if e["engine"] == data["best_engine"]), None)
    for provider, color in zip((best or {}).get("providers", []), _colors()[3:] + _colors(), strict=False):
        style = "--" if provider["is_secondary"] else "-"
        ax.axhline(provider["usd_per_m_tokens"], ls=style, lw=1, color=color,
                   label=f"{provider['id']} ${provider['usd_per_m_tokens']:.3g}")
    _load_axis(ax, data["engines"])
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(_money))
    ax.set_ylabel("USD per 1M tokens (input + output)")
    ax.set_title("Cost per million tokens vs load, against provider prices")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(fig)


def monthly_cost_plot(data: dict[str, Any]) -> bytes | None:
    curve = data["monthly_cost_curve"]
    if not curve or not curve["self_host"]:
        return None
    fig, ax = plt.subplots(figsize=SIZE)
    volumes = curve["volumes"]
    for (engine, costs), color in zip(curve["self_host"].items(), _colors(), strict=False):
        ax.plot(volumes, costs, color=color, lw=2.5, drawstyle="steps-post", label=f"self-hosted, {engine}")
    for (pid, costs), color in zip(curve["providers"].items(), _colors()[3:] + _colors(), strict=False):
        secondary = pid not in [p["id"] for e in data["engines"] for p in e["providers"] if not p["is_secondary"]]
        ax.plot(volumes, costs, ls="--" if secondary else "-", lw=1, color=color, label=pid)
        cross = curve["crossovers"].get(pid)
        if cross and volumes[0] <= cross <= volumes[-1]:
            at = (cross, cross * costs[0] / volumes[0])
            ax.plot(*at, "o", color=color, mec="black", ms=8)
            text = f"crossover {_volume(cross)}" + (" tokens/month" if pid == data["compared_to"] else "")
            ax.annotate(text, at, textcoords="offset points", xytext=(-8, 10), ha="right", fontsize=8,
                        fontweight="bold" if pid == data["compared_to"] else "normal")
    if curve["traffic"]:
        ax.axvline(curve["traffic"], color="black", lw=1, ls=":", label=f"your traffic {_volume(curve['traffic'])}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_volume))
    ax.yaxis.set_major_formatter(FuncFormatter(_money))
    ax.set_xlabel("monthly volume (input + output tokens)")
    ax.set_ylabel("USD per month")
    ax.set_title("Monthly cost vs monthly volume")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(fig)


def sensitivity_plot(data: dict[str, Any]) -> bytes | None:
    sens = data["sensitivity"]
    if not sens or sens["baseline"]["saving_usd_per_month"] is None:
        return None
    base = sens["baseline"]["saving_usd_per_month"]
    rows = [r for r in sens["rows"] if any(v["saving_usd_per_month"] is not None for v in r["variations"])]
    rows.sort(key=lambda r: max(abs(v["saving_usd_per_month"] - base) for v in r["variations"]))
    fig, ax = plt.subplots(figsize=(SIZE[0] * 1.25, 0.55 * len(rows) + 1.6))
    for y, row in enumerate(rows):
        values = [v["saving_usd_per_month"] for v in row["variations"]]
        low, high = min([*values, base]), max([*values, base])
        ax.barh(y, high - low, left=low, color="#9ecae1" if not row["flips"] else "#fdae6b", edgecolor="black")
        for v in row["variations"]:
            ax.plot([v["saving_usd_per_month"]], [y], "o", color="black", ms=4)
        ends = sorted(row["variations"], key=lambda v: v["saving_usd_per_month"])
        for v, side in ((ends[0], "right"), (ends[-1], "left"))[: 2 if len(ends) > 1 else 1]:
            at = v["saving_usd_per_month"]
            side = side if len(ends) > 1 else ("left" if at >= base else "right")
            ax.annotate(v["label"], (at, y), textcoords="offset points", xytext=(-6 if side == "right" else 6, 0),
                        ha=side, va="center", fontsize=7)
    everything = [base, 0.0, *(v["saving_usd_per_month"] for r in rows for v in r["variations"])]
    low, high = min(everything), max(everything)
    pad = 0.45 * (high - low or abs(base) or 1.0)
    ax.set_xlim(low - pad, high + pad)
    ax.axvline(base, color="black", lw=1, label=f"baseline {_signed(base)}")
    ax.axvline(0, color="red", lw=1.5, label="break-even")
    ax.set_yticks(range(len(rows)), [f"{r['name']}\n(now {r['base_label']})" for r in rows], fontsize=8)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _signed(v)))
    ax.set_xlabel(f"monthly saving from self-hosting vs {sens['compared_to']} (right of red: self-hosting cheaper)")
    ax.set_title("Sensitivity: one assumption at a time (orange: can flip the answer)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)
    return _png(fig)


def interactivity_plot(data: dict[str, Any]) -> bytes | None:
    """The view independent benchmarks use: throughput per GPU and cost per 1M tokens against the speed each
    user sees (output tokens/s per user, 1000 / TPOT p50), with the SLO's per-user speed marked."""
    assumptions = data["inputs"]["assumptions"]
    gpus = assumptions["gpus_per_replica"]
    owned = data.get("owned")
    owned_ratio = owned["usd_per_gpu_hour"] / assumptions["gpu_usd_per_hour"] \
        if owned and assumptions["gpu_usd_per_hour"] else None
    engines = [(e, [lv for lv in _levels(e) if lv["tpot_ms"]["p50"]]) for e in data["engines"]]
    if not any(levels for _, levels in engines):
        return None
    fig, (rate_ax, cost_ax) = plt.subplots(1, 2, figsize=(SIZE[0] * 1.25, SIZE[1]))
    for (engine, levels), color in zip(engines, _colors(), strict=False):
        speed = [1000 / lv["tpot_ms"]["p50"] for lv in levels]
        rate_ax.plot(speed, [lv["output_tokens_per_s"] / gpus for lv in levels], "o-", color=color,
                     label=engine["engine"])
        costed = [(s, lv["cost"]["usd_per_m_total_tokens"]) for s, lv in zip(speed, levels, strict=True)
                  if lv["cost"] and lv["cost"]["usd_per_m_total_tokens"] is not None]
        cost_ax.plot([c[0] for c in costed], [c[1] for c in costed], "o-", color=color,
                     label=f"{engine['engine']}, rented")
        if owned_ratio is not None:
            cost_ax.plot([c[0] for c in costed], [c[1] * owned_ratio for c in costed], "s--", color=color,
                         label=f"{engine['engine']}, owned")
    tpot = data["inputs"]["settings"]["slo"].get("tpot_ms")
    for ax in (rate_ax, cost_ax):
        if tpot:
            ax.axvline(1000 / tpot, color="red", lw=1.5, label=f"SLO: {1000 / tpot:g} tokens/s per user")
        ax.set_xlabel("output tokens/s per user (1000 / TPOT p50)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    rate_ax.set_ylabel("output tokens/s per GPU")
    rate_ax.set_ylim(bottom=0)
    rate_ax.set_title("Throughput per GPU vs per-user speed")
    cost_ax.set_yscale("log")
    cost_ax.yaxis.set_major_formatter(FuncFormatter(_money))
    cost_ax.yaxis.set_minor_formatter(FuncFormatter(_money))
    cost_ax.set_ylabel("USD per 1M tokens, fully busy")
    cost_ax.set_title("Cost vs per-user speed")
    fig.tight_layout()
    return _png(fig)


def power_plot(data: dict[str, Any]) -> bytes | None:
    """The GPUs' power and utilization against load, where they were read."""
    engines = [e for e in data["engines"] if e.get("energy", {}).get("measured")]
    if not engines:
        return None
    fig, (power_ax, util_ax) = plt.subplots(1, 2, figsize=(SIZE[0] * 1.25, SIZE[1]))
    for engine, color in zip(engines, _colors(), strict=False):
        levels = sorted((lv for lv in engine["energy"]["levels"] if lv["kind"] == engine["kind"]),
                        key=lambda lv: lv["load"])
        loads = [lv["load"] for lv in levels]
        power_ax.plot(loads, [lv["mean_power_w"] for lv in levels], "o-", color=color, label=engine["engine"])
        util_ax.plot(loads, [lv["mean_utilization_pct"] for lv in levels], "o-", color=color, label=engine["engine"])
    for ax, title, label in ((power_ax, "GPU power (all GPUs of a replica)", "W"),
                             (util_ax, "GPU utilization", "% (mean over GPUs)")):
        _load_axis(ax, engines)
        ax.set_title(title)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    return _png(fig)


def agent_sessions_plot(data: dict[str, Any]) -> bytes | None:
    """Agent sessions: p95 TTFT by step (later steps send longer contexts) and session durations against load."""
    sessions = data.get("agent_sessions")
    if not sessions:
        return None
    fig, (step_ax, time_ax) = plt.subplots(1, 2, figsize=(SIZE[0] * 1.25, SIZE[1]))
    colors = iter(_colors() * 4)
    for engine in sessions["engines"]:
        for lv in engine["levels"]:
            buckets = [(k, v) for k, v in lv["step_ttft_p95_ms"].items() if v is not None]
            step_ax.plot([k for k, _ in buckets], [v for _, v in buckets], "o-", color=next(colors),
                         label=f"{engine['engine']} {lv['label']}")
        done = sorted((lv for lv in engine["levels"] if lv["duration_s"]["p50"] is not None),
                      key=lambda lv: lv["load"])
        for stat, style in (("p50", ":"), ("p95", "-")):
            time_ax.plot([lv["load"] for lv in done], [lv["duration_s"][stat] for lv in done], "o" + style,
                         label=f"{engine['engine']} {stat}")
    step_ax.set_title("p95 TTFT by step of an agent")
    step_ax.set_xlabel("step")
    step_ax.set_ylabel("ms")
    time_ax.set_title("Session duration (completed sessions)")
    time_ax.set_xlabel("sessions alive (or starting per second)")
    time_ax.set_ylabel("s")
    for ax in (step_ax, time_ax):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    return _png(fig)


def session_lane_plot(data: dict[str, Any]) -> bytes | None:
    """One session as a swim lane: a lane per agent, a bar per call (dark up to its first token), the gaps
    between bars the tools' waits; subagents run in lanes of their own beside the main agent."""
    sessions = data.get("agent_sessions")
    lane = next((e["lane"] for e in sessions["engines"] if e["lane"]), None) if sessions else None
    if lane is None:
        return None
    agents = list(dict.fromkeys(bar["agent"] for bar in lane["bars"]))
    fig, ax = plt.subplots(figsize=(SIZE[0] * 1.25, 0.8 + 0.45 * len(agents)))
    for bar in lane["bars"]:
        y = agents.index(bar["agent"])
        first = bar["first_token_s"] if bar["first_token_s"] is not None else bar["end_s"]
        ax.barh(y, first - bar["send_s"], left=bar["send_s"], height=0.6, color="#3b6ea5")
        ax.barh(y, bar["end_s"] - first, left=first, height=0.6, color="#9cc0e6" if bar["ok"] else "#d62728")
        ax.text(bar["send_s"], y + 0.38, str(bar["step"]), fontsize=6)
    ax.set_yticks(range(len(agents)), agents)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the session's first call (dark: waiting for the first token; gaps: tools)")
    ax.set_title(f"Session {lane['session_id']} at {lane['level']}")
    ax.grid(True, axis="x", alpha=0.3)
    return _png(fig)


def _signed(value: float) -> str:
    return ("-" if value < 0 else "+") + _money(abs(value))


PLOTS: dict[str, tuple[str, Callable[[dict[str, Any]], bytes | None]]] = {
    "throughput": ("Output tokens/s vs concurrency, per engine", throughput_plot),
    "latency": ("TTFT and ITL percentiles vs concurrency, with the SLO", latency_plot),
    "cost_per_token": ("Cost per million tokens vs concurrency, against provider prices", cost_per_token_plot),
    "monthly_cost": ("Monthly cost vs monthly volume, with the crossover", monthly_cost_plot),
    "sensitivity": ("Sensitivity of the monthly saving to each assumption", sensitivity_plot),
    "interactivity": ("Throughput per GPU and cost per 1M tokens vs output tokens/s per user", interactivity_plot),
    "power": ("GPU power and utilization vs load", power_plot),
    "agent_sessions": ("Agent sessions: TTFT by step, and session durations vs load", agent_sessions_plot),
    "session_lane": ("One agent session, call by call", session_lane_plot),
}


def draw_all(data: dict[str, Any]) -> dict[str, bytes]:
    """Every plot that has data to show, by name, as PNG bytes."""
    drawn = {name: draw(data) for name, (_, draw) in PLOTS.items()}
    return {name: png for name, png in drawn.items() if png is not None}
