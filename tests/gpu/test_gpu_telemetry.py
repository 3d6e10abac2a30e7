"""GPU readings: nvidia-smi's CSV and NVML's values in our units, the sampler beside the server's metrics,
and each level's power and energy per token."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from loadgen.gpu import find_reader, from_nvml, parse_nvidia_smi_csv
from loadgen.telemetry import gpu_view, sampling

# What `nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total,power.draw,clocks.sm,
# temperature.gpu --format=csv,noheader,nounits` prints: an idle H100 and a GH200 that reports no power.
REAL_OUTPUT = """0, NVIDIA H100 80GB HBM3, 0, 1, 81559, 69.91, 345, 31
1, NVIDIA GH200 480GB, 100, 95123, 97871, [N/A], 1980, [Not Supported]
"""


def test_nvidia_smi_csv_becomes_samples_and_what_a_gpu_does_not_report_is_none() -> None:
    idle, busy = parse_nvidia_smi_csv(REAL_OUTPUT)
    assert (idle.index, idle.name, idle.utilization_pct, idle.memory_used_mib, idle.power_w) == \
        (0, "NVIDIA H100 80GB HBM3", 0.0, 1.0, 69.91)
    assert (busy.power_w, busy.temperature_c, busy.sm_clock_mhz) == (None, None, 1980.0)


def test_a_line_that_is_not_the_query_names_the_line_and_the_field() -> None:
    with pytest.raises(ValueError, match="line 1: expected 8 comma-separated fields"):
        parse_nvidia_smi_csv("0, H100, 5\n")
    with pytest.raises(ValueError, match="line 1: power.draw is 'lots', not a number"):
        parse_nvidia_smi_csv("0, H100, 1, 2, 3, lots, 5, 6\n")


def test_nvml_values_are_converted_from_its_units() -> None:
    """NVML gives memory in bytes and power in milliwatts."""
    sample = from_nvml(0, b"NVIDIA H200", 93, 120 * 1024**3, 141 * 1024**3, 612_345, 1980, 71)
    assert sample.name == "NVIDIA H200" and sample.memory_used_mib == 120 * 1024 and sample.power_w == 612.345
    assert from_nvml(1, "x", None, None, None, None, None, None).power_w is None


def test_the_reader_falls_back_to_nvidia_smi_and_says_why_when_there_is_none(standin_gpus: Path,
                                                                             monkeypatch) -> None:
    reader, how = find_reader()
    assert reader is not None and how == "nvidia-smi"
    assert [s.power_w for s in reader()] == [312.45, 312.45]
    monkeypatch.setenv("STANDIN_GPU_FAIL", "1")
    reader, why = find_reader()
    assert reader is None and "nvidia-ml-py is not installed" in why and "nvidia-smi exited 9" in why
    monkeypatch.setenv("PATH", "/nonexistent")
    assert "no nvidia-smi on PATH" in find_reader()[1]


def test_the_sampler_writes_gpu_readings_and_a_level_gets_its_power(standin_gpus: Path, tmp_path) -> None:
    path = tmp_path / "telemetry.jsonl"
    started = time.time()
    with sampling(None, path, gpu=True):
        time.sleep(2.6)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) >= 2 and all(len(line["gpus"]) == 2 for line in lines)
    view = gpu_view("c8", lines, started, time.time())
    assert view.num_gpus == 2 and view.mean_power_w == pytest.approx(624.9)
    assert view.mean_utilization_pct == pytest.approx(86.5) and view.max_temperature_c == 65
    assert view.joules_per_output_token(1249.8) == pytest.approx(0.5)
