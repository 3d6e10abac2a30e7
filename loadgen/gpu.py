"""The GPUs' own view: utilization, memory, power draw, SM clock and temperature, per GPU, read once a
second beside the server's `/metrics` (see `loadgen.telemetry`).

Two readers, the first that works: NVML through `nvidia-ml-py` (`pip install nvidia-ml-py`, no process per
sample), else `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` on PATH. Where neither answers,
`find_reader` says why, the run records it, and costs fall back to the catalog's board power. A value a
GPU does not report (`[N/A]`, `[Not Supported]`) is None, never 0.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

NVIDIA_SMI_FIELDS = ("index", "name", "utilization.gpu", "memory.used", "memory.total", "power.draw", "clocks.sm",
                     "temperature.gpu")
NVIDIA_SMI_TIMEOUT_S = 5.0
MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    utilization_pct: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    power_w: float | None
    sm_clock_mhz: float | None
    temperature_c: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_nvidia_smi_csv(text: str) -> list[GpuSample]:
    """`nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits`: one line per GPU.
    Raises ValueError naming the line when it is not that."""
    samples = []
    for number, line in enumerate(text.strip().splitlines(), start=1):
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != len(NVIDIA_SMI_FIELDS):
            raise ValueError(f"nvidia-smi line {number}: expected {len(NVIDIA_SMI_FIELDS)} comma-separated fields "
                             f"({', '.join(NVIDIA_SMI_FIELDS)}), got {len(parts)}")
        index, name, *numbers = parts
        values = [_number(value, NVIDIA_SMI_FIELDS[i + 2], number) for i, value in enumerate(numbers)]
        samples.append(GpuSample(int(index), name, *values))
    return samples


def _number(text: str, field: str, line: int) -> float | None:
    if text.startswith("[") or text in ("", "N/A"):  # [N/A], [Not Supported], [Unknown Error]
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"nvidia-smi line {line}: {field} is {text!r}, not a number") from None


def from_nvml(index: int, name: str | bytes, utilization_gpu: int | None, memory_used_bytes: int | None,
              memory_total_bytes: int | None, power_mw: int | None, sm_clock_mhz: int | None,
              temperature_c: int | None) -> GpuSample:
    """NVML's values in its own units (bytes, milliwatts) -> a sample in ours."""
    return GpuSample(
        index=index, name=name.decode() if isinstance(name, bytes) else name,
        utilization_pct=None if utilization_gpu is None else float(utilization_gpu),
        memory_used_mib=None if memory_used_bytes is None else memory_used_bytes / MIB,
        memory_total_mib=None if memory_total_bytes is None else memory_total_bytes / MIB,
        power_w=None if power_mw is None else power_mw / 1000,
        sm_clock_mhz=None if sm_clock_mhz is None else float(sm_clock_mhz),
        temperature_c=None if temperature_c is None else float(temperature_c))


GpuReader = Callable[[], list[GpuSample]]


def find_reader() -> tuple[GpuReader | None, str]:
    """The first reader that gives samples now, with its name; or None and why there is none."""
    reasons = []
    for name, make in (("NVML", _nvml_reader), ("nvidia-smi", _nvidia_smi_reader)):
        try:
            reader = make()
            if reader():
                return reader, name
            reasons.append(f"{name} reports no GPU")
        except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as exc:
            reasons.append(f"{name}: {exc}")
    return None, "; ".join(reasons)


def _nvidia_smi_reader() -> GpuReader:
    path = shutil.which("nvidia-smi")
    if path is None:
        raise OSError("no nvidia-smi on PATH")
    command = [path, f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}", "--format=csv,noheader,nounits"]

    def read() -> list[GpuSample]:
        done = subprocess.run(command, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"nvidia-smi exited {done.returncode}: {done.stderr.strip()[:200]}")
        return parse_nvidia_smi_csv(done.stdout)

    return read


def _nvml_reader() -> GpuReader:
    try:
        import pynvml
    except ImportError:
        raise OSError("nvidia-ml-py is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise OSError(f"NVML did not start ({exc})") from None

    def value(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except pynvml.NVMLError:
            return None

    def read() -> list[GpuSample]:
        samples = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            utilization = value(lambda h=h: pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            memory = value(lambda h=h: pynvml.nvmlDeviceGetMemoryInfo(h))
            samples.append(from_nvml(
                index, pynvml.nvmlDeviceGetName(h), utilization, memory.used if memory else None,
                memory.total if memory else None, value(lambda h=h: pynvml.nvmlDeviceGetPowerUsage(h)),
                value(lambda h=h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                value(lambda h=h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))))
        return samples

    return read
