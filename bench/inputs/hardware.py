"""What machine a run ran on: CPU model and cores, memory, and GPUs (through NVML when it is there, else
`nvidia-smi`; none on a machine without NVIDIA GPUs)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any


def describe_host() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": _memory_gib(),
        "gpus": describe_gpus(),
    }


def describe_gpus() -> list[dict[str, Any]]:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return _gpus_from_nvidia_smi()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append({"index": index, "name": pynvml.nvmlDeviceGetName(handle),
                         "memory_gib": round(memory.total / 2**30, 1), "driver": driver})
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _gpus_from_nvidia_smi() -> list[dict[str, Any]]:
    if shutil.which("nvidia-smi") is None:
        return []
    query = ["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader,nounits"]
    try:
        output = subprocess.run(query, capture_output=True, text=True, timeout=10, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    gpus = []
    for line in output.strip().splitlines():
        index, name, memory_mib, driver = (part.strip() for part in line.split(","))
        gpus.append({"index": int(index), "name": name, "memory_gib": round(float(memory_mib) / 1024, 1),
                     "driver": driver})
    return gpus


def cpu_model() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it (else what platform knows)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None
