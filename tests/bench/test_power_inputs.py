"""The GPUs' measured draw reaches the cost model per level: per GPU, a repeated level over its repeats."""

from __future__ import annotations

import pytest

from bench.flows.costinputs import power_per_gpu, with_power
from costmodel.types import MeasuredLevel
from loadgen.types import GpuView


def view(level: str, watts: float | None, gpus: int = 2) -> GpuView:
    return GpuView(level=level, num_samples=5, num_gpus=gpus, names=("H100",), mean_power_w=watts, max_power_w=watts,
                   mean_utilization_pct=80.0, max_memory_used_mib=1.0, mean_sm_clock_mhz=1980.0,
                   max_temperature_c=60.0)


def level(label: str) -> MeasuredLevel:
    return MeasuredLevel(label=label, load=8, request_per_s=1.0, output_tokens_per_s=100.0, input_tokens_per_s=400.0)


def test_each_level_gets_the_draw_per_gpu_and_a_repeated_one_the_mean_of_its_repeats() -> None:
    views = [view("c8", 800.0), view("c8#2", 1000.0), view("c16", 1200.0), view("c32", None)]
    c8, c16, c32 = with_power([level("c8"), level("c16"), level("c32")], views)
    assert c8.power_w_per_gpu == pytest.approx(450.0)  # (400 + 500) / 2
    assert c16.power_w_per_gpu == pytest.approx(600.0)
    assert c32.power_w_per_gpu is None  # not read: the cost model falls back to the board power


def test_the_levels_picked_are_the_only_ones_counted() -> None:
    views = [view("c8", 800.0), view("c12#2", 1100.0, gpus=1)]
    assert power_per_gpu(views, {"c12#2"}.__contains__) == pytest.approx(1100.0)
    assert power_per_gpu(views, {"c99"}.__contains__) is None
