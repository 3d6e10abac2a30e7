"""The same workload direct to the engine and through a UI in front of it (Open WebUI), level by level:
what the UI's proxy adds to TTFT and ITL, and the load at which it becomes the bottleneck.

Two short levels differ by chance: 12 requests in 15 s against 13 read as "89 %". So the throughput ratio
carries a 95 % interval, from the requests each level completed in its steady window (counts of completions
are close to Poisson: the log of the ratio has a standard error of sqrt(1/n_direct + 1/n_ui)), and the UI is
called the bottleneck only where the interval lies below 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadgen.types import LevelSummary

BOTTLENECK_SHARE = 0.9  # through the UI below this share of the direct throughput: the UI limits it
Z95 = 1.959964


@dataclass(frozen=True)
class UiLevel:
    level: str
    target: float  # users (or requests/s) of the level
    ttft_p50_direct_ms: float | None
    ttft_p50_ui_ms: float | None
    itl_p50_direct_ms: float | None
    itl_p50_ui_ms: float | None
    tokens_per_s_direct: float
    tokens_per_s_ui: float
    requests_direct: float | None = None  # requests completed in each steady window (the ratio's noise)
    requests_ui: float | None = None

    @property
    def ttft_added_ms(self) -> float | None:
        return _difference(self.ttft_p50_ui_ms, self.ttft_p50_direct_ms)

    @property
    def itl_added_ms(self) -> float | None:
        return _difference(self.itl_p50_ui_ms, self.itl_p50_direct_ms)

    @property
    def throughput_share(self) -> float | None:
        return self.tokens_per_s_ui / self.tokens_per_s_direct if self.tokens_per_s_direct else None

    @property
    def share_interval(self) -> tuple[float, float] | None:
        """The 95 % interval of `throughput_share`, from the requests each side completed; None without them."""
        share, n_direct, n_ui = self.throughput_share, self.requests_direct, self.requests_ui
        if not share or not n_direct or not n_ui:
            return None
        spread = Z95 * math.sqrt(1 / n_direct + 1 / n_ui)
        return share * math.exp(-spread), share * math.exp(spread)

    @property
    def is_bottleneck(self) -> bool:
        """Through the UI clearly less: below BOTTLENECK_SHARE, and its interval below 1 (where it has one)."""
        share, interval = self.throughput_share, self.share_interval
        return share is not None and share < BOTTLENECK_SHARE and (interval is None or interval[1] < 1)


def _difference(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def pair_levels(direct: list[LevelSummary], ui: list[LevelSummary]) -> list[UiLevel]:
    """Levels measured both ways (matched by label), in the direct run's order."""
    through = {s.level: s for s in ui}
    return [UiLevel(d.level, d.target, d.latency.ttft_ms.p50, u.latency.ttft_ms.p50, d.latency.itl_ms.p50,
                    u.latency.itl_ms.p50, d.throughput.output_tokens_per_s, u.throughput.output_tokens_per_s,
                    _completed(d), _completed(u))
            for d in direct if (u := through.get(d.level)) is not None]


def _completed(s: LevelSummary) -> float | None:
    """Requests completed in the steady window (what the level's throughput rests on)."""
    carried = s.throughput
    return carried.request_per_s * carried.window_s if carried.window_s else None


def pairs_through_ui(summaries: list[LevelSummary], via: str) -> dict[str, list[UiLevel]]:
    """Each engine measured through a UI (its name ends in `via`) beside the same engine direct: its levels
    paired, by the direct engine's name (an engine without its direct run is left out)."""
    names = dict.fromkeys(s.engine for s in summaries)
    return {name.removesuffix(via): pair_levels([s for s in summaries if s.engine == name.removesuffix(via)],
                                                [s for s in summaries if s.engine == name])
            for name in names if name.endswith(via) and name.removesuffix(via) in names}


def bottleneck(levels: list[UiLevel]) -> UiLevel | None:
    """The first level at which the UI clearly carried less than the engine direct (UiLevel.is_bottleneck)."""
    return next((lv for lv in levels if lv.is_bottleneck), None)


def bottleneck_sentence(levels: list[UiLevel]) -> str:
    if not levels:
        return "no level was measured both ways"
    found = bottleneck(levels)
    if found is not None:
        assert found.throughput_share is not None
        interval = found.share_interval
        within = f", 95 % interval {interval[0]:.0%}-{interval[1]:.0%}" if interval else ""
        return (f"Open WebUI becomes the bottleneck at {found.level}: {found.throughput_share:.0%} of the direct "
                f"output tokens/s{within} ({found.tokens_per_s_ui:.1f} vs {found.tokens_per_s_direct:.1f})")
    noisy = next((lv for lv in levels if lv.throughput_share is not None and lv.throughput_share < BOTTLENECK_SHARE),
                 None)
    if noisy is not None and (interval := noisy.share_interval) is not None:
        return (f"Open WebUI is not shown to be the bottleneck: at {noisy.level} within noise (ratio "
                f"{noisy.throughput_share:.2f}, interval {interval[0]:.2f}-{interval[1]:.2f}, "
                f"{noisy.requests_ui:.0f} against {noisy.requests_direct:.0f} requests): repeat, or lengthen "
                "--duration, to tell")
    return (f"Open WebUI kept up at every level measured (through it: at least {BOTTLENECK_SHARE:.0%} of the "
            "direct output tokens/s)")
