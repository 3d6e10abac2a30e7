"""The same workload direct to the engine and through a UI in front of it (Open WebUI), level by level:
what the UI's proxy adds to TTFT and ITL, and the load at which it becomes the bottleneck."""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.types import LevelSummary

BOTTLENECK_SHARE = 0.9  # through the UI below this share of the direct throughput: the UI limits it


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

    @property
    def ttft_added_ms(self) -> float | None:
        return _difference(self.ttft_p50_ui_ms, self.ttft_p50_direct_ms)

    @property
    def itl_added_ms(self) -> float | None:
        return _difference(self.itl_p50_ui_ms, self.itl_p50_direct_ms)

    @property
    def throughput_share(self) -> float | None:
        return self.tokens_per_s_ui / self.tokens_per_s_direct if self.tokens_per_s_direct else None


def _difference(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def pair_levels(direct: list[LevelSummary], ui: list[LevelSummary]) -> list[UiLevel]:
    """Levels measured both ways (matched by label), in the direct run's order."""
    through = {s.level: s for s in ui}
    return [UiLevel(d.level, d.target, d.latency.ttft_ms.p50, u.latency.ttft_ms.p50, d.latency.itl_ms.p50,
                    u.latency.itl_ms.p50, d.throughput.output_tokens_per_s, u.throughput.output_tokens_per_s)
            for d in direct if (u := through.get(d.level)) is not None]


def pairs_through_ui(summaries: list[LevelSummary], via: str) -> dict[str, list[UiLevel]]:
    """Each engine measured through a UI (its name ends in `via`) beside the same engine direct: its levels
    paired, by the direct engine's name (an engine without its direct run is left out)."""
    names = dict.fromkeys(s.engine for s in summaries)
    return {name.removesuffix(via): pair_levels([s for s in summaries if s.engine == name.removesuffix(via)],
                                                [s for s in summaries if s.engine == name])
            for name in names if name.endswith(via) and name.removesuffix(via) in names}


def bottleneck(levels: list[UiLevel], share: float = BOTTLENECK_SHARE) -> UiLevel | None:
    """The first level at which the UI carried less than `share` of the direct throughput."""
    return next((lv for lv in levels if lv.throughput_share is not None and lv.throughput_share < share), None)


def bottleneck_sentence(levels: list[UiLevel]) -> str:
    if not levels:
        return "no level was measured both ways"
    found = bottleneck(levels)
    if found is None:
        return (f"Open WebUI kept up at every level measured (through it: at least {BOTTLENECK_SHARE:.0%} of the "
                "direct output tokens/s)")
    assert found.throughput_share is not None
    return (f"Open WebUI becomes the bottleneck at {found.level}: {found.throughput_share:.0%} of the direct "
            f"output tokens/s ({found.tokens_per_s_ui:.1f} vs {found.tokens_per_s_direct:.1f})")
