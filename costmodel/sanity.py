"""Sanity bands: is a self-hosted cost per 1M output tokens one that published benchmarks make plausible?

The bands are those of ../shared/PRICES-2026-10.md ("Published throughput", compiled 2026-10): an 8B model
on one H100 costs about $0.15-0.60 per 1M output tokens at full utilization at $2.7-4 per GPU-hour, and a
70B FP8 model on two H100s about $0.40-1.20 (at the same GPU prices, which its throughput band implies).
Far outside them (an 8B model below $0.05, or above $5 at 16 or more concurrent requests) the figure
more likely says something about the measurement than about money. Pure: figures in, warnings out; it
knows nothing of runs, catalogs or engines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WHY = "may point to a misconfigured engine, a bad benchmark or extreme ISL/OSL"
SMALL_MODEL_FLOOR_USD = 0.05  # per 1M output tokens, an 8B-class model
HIGH_LOAD_CEILING_USD = 5.0  # per 1M output tokens, a model of 8B or fewer, at HIGH_LOAD_CONCURRENCY or more
HIGH_LOAD_CONCURRENCY = 16
BAND_GPU_USD_PER_HOUR = (2.7, 4.0)  # the GPU prices the bands were drawn at
_SIZE = re.compile(r"(?:^|[-_/])(\d+(?:\.\d+)?)b(?=$|[-_.])")


@dataclass(frozen=True)
class Band:
    """A published range of cost per 1M output tokens for one model size on one kind of GPU."""

    name: str
    min_params_b: float
    max_params_b: float
    gpu_prefix: str
    gpus: int
    low_usd: float
    high_usd: float

    def covers(self, params_b: float, gpu: str, gpus: int) -> bool:
        return (
            self.min_params_b <= params_b <= self.max_params_b and gpu.startswith(self.gpu_prefix) and gpus == self.gpus
        )


BANDS = (
    Band(name="an 8B model on 1 x H100", min_params_b=7, max_params_b=9, gpu_prefix="h100", gpus=1,
         low_usd=0.15, high_usd=0.60),
    Band(name="a 70B FP8 model on 2 x H100", min_params_b=65, max_params_b=75, gpu_prefix="h100", gpus=2,
         low_usd=0.40, high_usd=1.20),
)
SMALL_MODEL = (7, 9)  # billions of parameters: the "8B" of the floor (the ceiling holds for smaller ones too)


def model_params_b(model: str | None) -> float | None:
    """Billions of parameters a model id names: `llama-3.1-8b` -> 8, `qwen3-235b-a22b` -> 235; else None."""
    found = _SIZE.search(model.lower()) if model else None
    return float(found[1]) if found else None


def sanity_warnings(
    usd_per_m_output_tokens: float,
    model: str | None = None,
    gpu: str | None = None,
    gpus_per_replica: int = 1,
    gpu_usd_per_hour: float | None = None,
    concurrency: float | None = None,
) -> list[str]:
    """Warnings for a cost per 1M output tokens at full utilization that lies outside the bands; [] when
    nothing is known to compare it with. A band applies only at the GPU prices it was drawn at."""
    cost, params = usd_per_m_output_tokens, model_params_b(model)
    what = f"${cost:.3g} per 1M output tokens"
    if params is not None and SMALL_MODEL[0] <= params <= SMALL_MODEL[1] and cost < SMALL_MODEL_FLOOR_USD:
        return [
            f"self-hosted {what} is below ${SMALL_MODEL_FLOOR_USD:.2f}, less than an 8B model plausibly "
            f"costs: this {WHY}"
        ]
    if (
        params is not None
        and params <= SMALL_MODEL[1]
        and concurrency is not None
        and concurrency >= HIGH_LOAD_CONCURRENCY
        and cost > HIGH_LOAD_CEILING_USD
    ):
        return [
            f"self-hosted {what} at {concurrency:g} concurrent requests is above "
            f"${HIGH_LOAD_CEILING_USD:.0f}: this {WHY}"
        ]
    low, high = BAND_GPU_USD_PER_HOUR
    if params is None or gpu is None or gpu_usd_per_hour is None or not low <= gpu_usd_per_hour <= high:
        return []
    for band in BANDS:
        if band.covers(params, gpu.lower(), gpus_per_replica) and not band.low_usd <= cost <= band.high_usd:
            return [
                f"self-hosted {what} is outside the published ${band.low_usd:.2f}-{band.high_usd:.2f} for "
                f"{band.name} at ${low:g}-{high:g}/GPU-h: this {WHY}"
            ]
    return []
