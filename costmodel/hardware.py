"""GPU specifications (board power, memory, bandwidth) from the shipped `prices/hardware.yaml`.

What owned hardware costs to power when its draw was not measured, and what a memory plan starts from.
Reads that one file; validated like the price catalogs, so a bad row names its field.
"""

from __future__ import annotations

import functools
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from common.validation import parse_yaml_mapping, validate
from costmodel.prices import GPU_ALIASES, PriceError

HARDWARE_FILE = "hardware.yaml"


class GpuSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    name: str
    board_power_w: float = Field(gt=0)
    memory_gb: float = Field(gt=0)
    bandwidth_tb_s: float = Field(gt=0)
    source: str = Field(min_length=1)
    note: str = ""


def parse_hardware(text: str, origin: str) -> dict[str, GpuSpec]:
    raw = parse_yaml_mapping(text, origin, PriceError, "a mapping with a `gpus` list of rows")
    rows = raw.get("gpus")
    if not isinstance(rows, list) or set(raw) != {"gpus"}:
        raise PriceError(f"{origin}: expected a mapping with a `gpus` list of rows")
    specs = [validate(GpuSpec, row, f"{origin}: gpus[{i}]", PriceError) for i, row in enumerate(rows)]
    return {spec.gpu: spec for spec in specs}


@functools.cache
def shipped_hardware() -> dict[str, GpuSpec]:
    text = (resources.files("costmodel") / "prices" / HARDWARE_FILE).read_text()
    return parse_hardware(text, f"costmodel/prices/{HARDWARE_FILE}")


def gpu_spec(name: str | None) -> GpuSpec | None:
    """A GPU name (or alias) -> its specification; None when the catalog does not know it."""
    if name is None:
        return None
    return shipped_hardware().get(GPU_ALIASES.get(name.lower(), name.lower()))
