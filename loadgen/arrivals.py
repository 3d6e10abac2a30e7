"""When each request of a level is sent.

Closed loop: N users, each sends its next request the moment its last one ends (the load follows the
server). Open loop: requests arrive on a seeded schedule whatever the server does (Poisson, or gamma
with a burstiness factor: 1 is Poisson, below 1 burstier, above 1 more regular; the same convention as
vLLM's benchmark), so a slow server builds a queue instead of slowing the load down. A trace is open loop
too, on the trace's own timestamps (times `value`, the time scale).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

LevelKind = Literal["concurrency", "rate", "trace"]
LABEL_KINDS: dict[str, LevelKind] = {"c": "concurrency", "r": "rate", "t": "trace"}
LABEL_PREFIXES = {kind: prefix for prefix, kind in LABEL_KINDS.items()}
ADAPTERS_MARK = "+a"  # c16+a4: 16 users across the first 4 adapters


@dataclass(frozen=True)
class Level:
    """One point of a sweep: `concurrency` users (closed loop), `rate` requests/s (open loop), or a `trace`
    replayed at its own timestamps times `value` (0.5: twice as fast).

    Its label names it in every record: `c8`, `r2.5`, `t0.5`; the second repeat of a level is `c8#2`, and a level
    run again after the client fell behind gets `~2` (`c8~2`, `c8#2~2`). A level of a sweep across LoRA adapter
    counts (`adapters`: the first N adapters of the mix, 0 the base model alone) is `c16+a4`."""

    kind: LevelKind
    value: float
    burstiness: float = 1.0
    max_concurrency: int | None = None  # open loop only: a cap on requests in flight
    repeat: int = 1
    attempt: int = 1
    adapters: int | None = None

    def __post_init__(self) -> None:
        if self.kind == "concurrency" and (self.value < 1 or self.value != int(self.value)):
            raise ValueError(f"concurrency must be a whole number >= 1, got {self.value:g}")
        if self.kind == "rate" and self.value <= 0:
            raise ValueError(f"rate must be > 0 requests/s, got {self.value:g}")
        if self.kind == "trace" and self.value <= 0:
            raise ValueError(f"time scale must be > 0, got {self.value:g}")
        if self.burstiness <= 0:
            raise ValueError(f"burstiness must be > 0, got {self.burstiness:g}")
        if self.repeat < 1 or self.attempt < 1:
            raise ValueError("repeat and attempt count from 1")

    @property
    def base_label(self) -> str:
        value = f"{int(self.value)}" if self.kind == "concurrency" else f"{self.value:g}"
        adapters = f"{ADAPTERS_MARK}{self.adapters}" if self.adapters is not None else ""
        return LABEL_PREFIXES[self.kind] + value + adapters

    @property
    def label(self) -> str:
        repeat = f"#{self.repeat}" if self.repeat > 1 else ""
        attempt = f"~{self.attempt}" if self.attempt > 1 else ""
        return self.base_label + repeat + attempt

    @property
    def num_users(self) -> int:
        return int(self.value)


@dataclass(frozen=True)
class LevelLabel:
    base: str  # c8, r2.5, t1, c16+a4
    repeat: int = 1
    attempt: int = 1

    @property
    def target(self) -> float:
        """The load: users or requests/s (NaN for a label that names none)."""
        try:
            return float(self.base[1:].partition(ADAPTERS_MARK)[0])
        except ValueError:
            return float("nan")

    @property
    def adapters(self) -> int | None:
        """The adapters of a level of an adapter-count sweep (0: the base model alone); None elsewhere."""
        count = self.base.partition(ADAPTERS_MARK)[2]
        return int(count) if count.isdigit() else None

    @property
    def kind(self) -> str | None:
        return LABEL_KINDS.get(self.base[:1])


def parse_label(label: str) -> LevelLabel:
    """`c8#2~2` -> LevelLabel("c8", repeat=2, attempt=2); the inverse of `Level.label`."""
    rest, _, attempt = label.partition("~")
    base, _, repeat = rest.partition("#")
    return LevelLabel(base, int(repeat) if repeat.isdigit() else 1, int(attempt) if attempt.isdigit() else 1)


def arrival_offsets(rate_per_s: float, burstiness: float, seed: int) -> Iterator[float]:
    """Endless send times in seconds from the level's start; the first request goes at 0."""
    rng = np.random.default_rng(seed)
    shape, scale = burstiness, 1.0 / (rate_per_s * burstiness)
    t = 0.0
    yield t
    while True:
        for gap in rng.gamma(shape, scale, size=1024):
            t += float(gap)
            yield t
