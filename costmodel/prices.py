"""Price catalogs: GPU rental per GPU-hour and provider prices per million tokens, each row sourced and dated.

The shipped catalogs live in `costmodel/prices/*.yaml`; a user's own file (`--prices FILE`) adds rows or
replaces rows with the same id. A bad row is reported as `FILE: providers[3] (id 'x'): field: problem`.
This is the only module of `costmodel` that reads files, and it reads only price YAML.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.validation import parse_yaml_mapping, validate
from costmodel.inputs import PricingKind

MAX_PRICE_AGE_DAYS = 90
SHIPPED_FILES = ("gpus.yaml", "providers.yaml")
GPU_ALIASES = {"h100": "h100-sxm", "a100": "a100-80gb", "a100-80g": "a100-80gb", "4090": "rtx-4090",
               "rtx4090": "rtx-4090", "a10": "a10g"}
ROW_ID = r"^[a-z0-9][a-z0-9._-]*(/[a-z0-9][a-z0-9._-]*)+$"


class PriceError(ValueError):
    """A price file or a price name the user gave is wrong; the message says which and what is accepted."""


class GpuPrice(BaseModel):
    """One GPU at one cloud at one pricing kind, per GPU-hour. Node prices (8 GPUs) are divided and say so."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=ROW_ID)
    gpu: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    cloud: str
    pricing: PricingKind
    usd_per_gpu_hour: float = Field(ge=0)
    gpus_per_node: int = Field(default=1, ge=1)
    node_usd_per_hour: float | None = Field(default=None, ge=0)
    commitment: str | None = None
    source: str = Field(min_length=1)
    retrieved: date
    note: str = ""

    @model_validator(mode="after")
    def _node_price_divides(self) -> GpuPrice:
        if self.node_usd_per_hour is not None:
            per_gpu = self.node_usd_per_hour / self.gpus_per_node
            if abs(per_gpu - self.usd_per_gpu_hour) > 0.005:
                raise ValueError(f"usd_per_gpu_hour {self.usd_per_gpu_hour} is not node_usd_per_hour "
                                 f"{self.node_usd_per_hour} / gpus_per_node {self.gpus_per_node} = {per_gpu:.4f}")
        return self

    def label(self) -> str:
        per_node = f", {self.gpus_per_node}-GPU node / {self.gpus_per_node}" if self.gpus_per_node > 1 else ""
        return f"{self.id} (${self.usd_per_gpu_hour:.2f}/GPU-h{per_node})"


class ProviderPrice(BaseModel):
    """One model at one host, USD per million tokens. `usd_per_m_cached_input` defaults to the input price."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=ROW_ID)
    host: str
    model: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    model_name: str = ""
    open_weights: bool = True
    usd_per_m_input: float = Field(ge=0)
    usd_per_m_cached_input: float | None = Field(default=None, ge=0)
    usd_per_m_output: float = Field(ge=0)
    batch_discount: float = Field(default=0.0, ge=0, lt=1)
    quantization: str | None = None
    source: str = Field(min_length=1)
    retrieved: date
    note: str = ""

    @property
    def cached_input(self) -> float:
        return self.usd_per_m_input if self.usd_per_m_cached_input is None else self.usd_per_m_cached_input


@dataclass(frozen=True)
class PriceCatalog:
    gpus: tuple[GpuPrice, ...]
    providers: tuple[ProviderPrice, ...]
    origins: tuple[str, ...] = ()

    def gpu(self, name: str, pricing: PricingKind = "on-demand") -> GpuPrice:
        """A row id, or a GPU name: its median-priced row of that pricing kind (lower median)."""
        by_id = {row.id: row for row in self.gpus}
        if name in by_id:
            return by_id[name]
        gpu = GPU_ALIASES.get(name.lower(), name.lower())
        rows = sorted((r for r in self.gpus if r.gpu == gpu and r.pricing == pricing),
                      key=lambda r: (r.usd_per_gpu_hour, r.id))
        if rows:
            return rows[(len(rows) - 1) // 2]
        if any(r.gpu == gpu for r in self.gpus):
            kinds = sorted({r.pricing for r in self.gpus if r.gpu == gpu})
            raise PriceError(f"--gpu {name}: no {pricing} price for {gpu}; the catalog has {', '.join(kinds)}")
        raise PriceError(f"unknown GPU '{name}'{_did_you_mean(name, [*self.gpu_names(), *by_id])}; known GPUs: "
                         f"{', '.join(self.gpu_names())} (or a price row id such as {self.gpus[0].id}, "
                         f"or your own price with --gpu-price)")

    def gpu_rows(self, gpu: str) -> list[GpuPrice]:
        gpu = GPU_ALIASES.get(gpu.lower(), gpu.lower())
        return [r for r in self.gpus if r.gpu == gpu]

    def gpu_names(self) -> list[str]:
        return sorted({r.gpu for r in self.gpus})

    def provider_rows(self, names: Iterable[str]) -> list[ProviderPrice]:
        """Each name is a row id (`together/llama-3.1-8b`) or a model id (`llama-3.1-8b`: all its hosts)."""
        chosen: dict[str, ProviderPrice] = {}
        for name in names:
            rows = [r for r in self.providers if name in (r.id, r.model)]
            if not rows:
                known = sorted({r.model for r in self.providers} | {r.id for r in self.providers})
                raise PriceError(f"unknown provider '{name}'{_did_you_mean(name, known)}; give a price row id "
                                 f"(host/model, e.g. {self.providers[0].id}) or a model id "
                                 f"({', '.join(self.model_ids())})")
            chosen.update((r.id, r) for r in rows)
        return sorted(chosen.values(), key=lambda r: (r.model, r.id))

    def model_ids(self) -> list[str]:
        return sorted({r.model for r in self.providers})


def _did_you_mean(name: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(name.lower(), choices, n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def load_catalog(extra_files: Sequence[Path] = ()) -> PriceCatalog:
    """The shipped catalogs, then each extra file in turn: same id replaces, new id adds."""
    gpus: dict[str, GpuPrice] = {}
    providers: dict[str, ProviderPrice] = {}
    origins = []
    for name in SHIPPED_FILES:
        text = (resources.files("costmodel") / "prices" / name).read_text()
        _merge(parse_price_file(text, f"costmodel/prices/{name}"), gpus, providers)
        origins.append(f"costmodel/prices/{name}")
    for path in extra_files:
        if not Path(path).is_file():
            raise PriceError(f"--prices {path}: no such file")
        _merge(parse_price_file(Path(path).read_text(), str(path)), gpus, providers)
        origins.append(str(path))
    return PriceCatalog(tuple(gpus.values()), tuple(providers.values()), tuple(origins))


def _merge(catalog: PriceCatalog, gpus: dict[str, GpuPrice], providers: dict[str, ProviderPrice]) -> None:
    gpus.update((row.id, row) for row in catalog.gpus)
    providers.update((row.id, row) for row in catalog.providers)


def parse_price_file(text: str, origin: str) -> PriceCatalog:
    expected = "a mapping with a `gpus` and/or a `providers` list of rows"
    raw = parse_yaml_mapping(text, origin, PriceError, expected)
    if not set(raw) <= {"gpus", "providers"} or not raw:
        raise PriceError(f"{origin}: expected {expected}")
    gpus = tuple(_rows(raw.get("gpus") or [], GpuPrice, origin, "gpus"))
    providers = tuple(_rows(raw.get("providers") or [], ProviderPrice, origin, "providers"))
    return PriceCatalog(gpus, providers, (origin,))


def _rows(raw: Any, model: type[BaseModel], origin: str, section: str) -> list[Any]:
    if not isinstance(raw, list):
        raise PriceError(f"{origin}: {section}: expected a list of rows")
    rows, seen = [], set()
    for index, item in enumerate(raw):
        where = f"{origin}: {section}[{index}]"
        if not isinstance(item, dict):
            raise PriceError(f"{where}: expected a mapping of fields")
        if "id" in item:
            where += f" (id '{item['id']}')"
        row = validate(model, item, where, PriceError)
        if row.id in seen:  # type: ignore[attr-defined]
            raise PriceError(f"{where}: id appears twice in this file")
        seen.add(row.id)  # type: ignore[attr-defined]
        rows.append(row)
    return rows


@dataclass(frozen=True)
class StalePrice:
    id: str
    retrieved: date
    age_days: int


def stale_prices(rows: Iterable[GpuPrice | ProviderPrice], today: date,
                 max_age_days: int = MAX_PRICE_AGE_DAYS) -> list[StalePrice]:
    """Rows retrieved more than `max_age_days` before `today`, oldest first."""
    stale = [StalePrice(r.id, r.retrieved, (today - r.retrieved).days) for r in rows
             if (today - r.retrieved).days > max_age_days]
    return sorted(stale, key=lambda s: (-s.age_days, s.id))
