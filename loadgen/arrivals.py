"""When each request of a level is sent.

Closed loop: N users, each sends its next request the moment its last one ends (the load follows the
server). Open loop: requests arrive on a seeded schedule whatever the server does (Poisson, or gamma
with a burstiness factor: 1 is Poisson, below 1 burstier, above 1 more regular; the same convention as
vLLM's benchmark), so a slow server builds a queue instead of slowing the load down.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

LevelKind = Literal["concurrency", "rate"]


@dataclass(frozen=True)
class Level:
    """One point of a sweep: `concurrency` users (closed loop) or `rate` requests/s (open loop)."""

    kind: LevelKind
    value: float
    burstiness: float = 1.0
    max_concurrency: int | None = None  # open loop only: a cap on requests in flight

    def __post_init__(self) -> None:
        if self.kind == "concurrency" and (self.value < 1 or self.value != int(self.value)):
            raise ValueError(f"concurrency must be a whole number >= 1, got {self.value:g}")
        if self.kind == "rate" and self.value <= 0:
            raise ValueError(f"rate must be > 0 requests/s, got {self.value:g}")
        if self.burstiness <= 0:
            raise ValueError(f"burstiness must be > 0, got {self.burstiness:g}")

    @property
    def label(self) -> str:
        return f"c{int(self.value)}" if self.kind == "concurrency" else f"r{self.value:g}"

    @property
    def num_users(self) -> int:
        return int(self.value)


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
