"""Price catalogs: GPU rental per GPU-hour and provider prices per million tokens, each row sourced and dated.

The shipped catalogs live in `costmodel/prices/*.yaml`; a user's own file (`--prices FILE`) adds rows or
replaces rows with the same id. A bad row is reported as `FILE: providers[3] (id 'x'): field: problem`.
This is the only module of `costmodel` that reads files, and it reads only price YAML.

Dates: `retrieved` is the day the figure was read, or `YYYY-MM` where the source gives only the month
(stored as the month's first day, the earliest it can be, with `retrieved_precision: month`), or null where
the source is undated. A row is a *default* (picked for a GPU name or a model id) only when it is dated,
not `superseded_by` a newer row, and not marked `default: false`; every row stays choosable by its id.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.units import usd_rate
from common.validation import parse_yaml_mapping, read_text, validate
from costmodel.inputs import RESERVED_KINDS, RESERVED_TERMS, PricingKind

MAX_PRICE_AGE_DAYS = 90
MAX_DEFAULT_AGE_DAYS = 365  # a row older than this on the day of the decision is never picked by a name
SHIPPED_FILES = ("gpus.yaml", "providers.yaml", "finetunes.yaml")
GPU_ALIASES = {"h100": "h100-sxm", "a100": "a100-80gb", "a100-80g": "a100-80gb", "4090": "rtx-4090",
               "rtx4090": "rtx-4090", "a10": "a10g"}
ROW_ID = r"^[a-z0-9][a-z0-9._-]*(/[a-z0-9][a-z0-9._-]*)+$"
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


class PriceError(ValueError):
    """A price file or a price name the user gave is wrong; the message says which and what is accepted."""


class _Dated(BaseModel):
    """Where a row's figure comes from and when it was read; whether a name may pick it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=ROW_ID)
    source: str = Field(min_length=1)
    retrieved: date | None
    retrieved_precision: Literal["day", "month"] = "day"
    superseded_by: str | None = Field(default=None, pattern=ROW_ID)
    default: bool = True
    note: str = ""

    @model_validator(mode="before")
    @classmethod
    def _month_only(cls, raw: Any) -> Any:
        """`retrieved: 2026-06` (the month is all the source says) -> the 1st, with retrieved_precision month."""
        if isinstance(raw, dict) and isinstance(raw.get("retrieved"), str):
            month = _MONTH.match(raw["retrieved"].strip())
            if month:
                if raw.get("retrieved_precision", "month") != "month":
                    raise ValueError("retrieved YYYY-MM goes with retrieved_precision month")
                return {**raw, "retrieved": f"{month[1]}-{month[2]}-01", "retrieved_precision": "month"}
        return raw

    @model_validator(mode="after")
    def _dated_or_said(self) -> _Dated:
        if self.retrieved is None and self.retrieved_precision != "day":
            raise ValueError("retrieved_precision needs a retrieved date")
        if self.superseded_by == self.id:
            raise ValueError("superseded_by names the row itself")
        return self

    @property
    def is_default(self) -> bool:
        """May a GPU name or a model id pick this row? Only a dated, current row not marked otherwise."""
        return self.default and self.retrieved is not None and self.superseded_by is None

    @property
    def retrieved_text(self) -> str:
        if self.retrieved is None:
            return "undated"
        return self.retrieved.strftime("%Y-%m") if self.retrieved_precision == "month" else self.retrieved.isoformat()


class GpuPrice(_Dated):
    """One GPU at one cloud at one pricing kind, per GPU-hour. Node prices (8 GPUs) are divided and say so;
    a serverless row's hour is its per-second price x 3600."""

    gpu: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    cloud: str
    pricing: PricingKind
    usd_per_gpu_hour: float = Field(ge=0)
    usd_per_gpu_second: float | None = Field(default=None, ge=0)
    cold_start_s: float | None = Field(default=None, ge=0)
    gpus_per_node: int = Field(default=1, ge=1)
    node_usd_per_hour: float | None = Field(default=None, ge=0)
    commitment: str | None = None

    @model_validator(mode="after")
    def _prices_agree(self) -> GpuPrice:
        if self.node_usd_per_hour is not None:
            per_gpu = self.node_usd_per_hour / self.gpus_per_node
            if abs(per_gpu - self.usd_per_gpu_hour) > 0.005:
                raise ValueError(f"usd_per_gpu_hour {self.usd_per_gpu_hour} is not node_usd_per_hour "
                                 f"{self.node_usd_per_hour} / gpus_per_node {self.gpus_per_node} = {per_gpu:.4f}")
        if self.usd_per_gpu_second is not None:
            hourly = self.usd_per_gpu_second * 3600
            if abs(hourly - self.usd_per_gpu_hour) > 0.005:
                raise ValueError(f"usd_per_gpu_hour {self.usd_per_gpu_hour} is not usd_per_gpu_second "
                                 f"{self.usd_per_gpu_second} x 3600 = {hourly:.4f}")
        if self.pricing != "serverless" and (self.usd_per_gpu_second is not None or self.cold_start_s is not None):
            raise ValueError("usd_per_gpu_second and cold_start_s are for pricing: serverless")
        if self.pricing == "reserved" and not self.commitment:
            raise ValueError("pricing reserved needs its term in commitment (e.g. '6 months'), or use "
                             "reserved-1y or reserved-3y")
        if self.commitment and self.pricing not in RESERVED_KINDS:
            raise ValueError(f"commitment is for the reserved kinds, not pricing {self.pricing}")
        return self

    @property
    def term(self) -> str | None:
        """How long a reserved price commits to: the row's own words, else its kind's."""
        return self.commitment or RESERVED_TERMS.get(self.pricing)

    def label(self) -> str:
        per_node = f", {self.gpus_per_node}-GPU node / {self.gpus_per_node}" if self.gpus_per_node > 1 else ""
        term = f", reserved for {self.term}" if self.term else ""
        return f"{self.id} ({usd_rate(self.usd_per_gpu_hour)}/GPU-h{per_node}{term})"


class ProviderPrice(_Dated):
    """One model at one host, USD per million tokens. `usd_per_m_cached_input` defaults to the input price."""

    host: str
    model: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    model_name: str = ""
    open_weights: bool = True
    usd_per_m_input: float = Field(ge=0)
    usd_per_m_cached_input: float | None = Field(default=None, ge=0)
    usd_per_m_output: float = Field(ge=0)
    batch_discount: float = Field(default=0.0, ge=0, lt=1)
    quantization: str | None = None

    @property
    def cached_input(self) -> float:
        return self.usd_per_m_input if self.usd_per_m_cached_input is None else self.usd_per_m_cached_input


class FinetunePrice(_Dated):
    """How one host bills a LoRA fine-tune of an open model: `serverless-lora`, per token at `base_price_markup`
    times the base model's price (1.0: the base price), plus `usd_per_adapter_month` for each adapter kept; or
    `dedicated`, a deployment of its own billed by the GPU-hour on `gpu`."""

    host: str
    kind: Literal["serverless-lora", "dedicated"]
    base_price_markup: float | None = Field(default=None, ge=1)
    usd_per_adapter_month: float = Field(default=0.0, ge=0)
    usd_per_gpu_hour: float | None = Field(default=None, gt=0)
    gpu: str | None = None

    @model_validator(mode="after")
    def _kind_has_its_price(self) -> FinetunePrice:
        if self.kind == "serverless-lora" and self.base_price_markup is None:
            raise ValueError("kind serverless-lora needs base_price_markup (1.0: the base model's per-token price)")
        if self.kind == "dedicated" and (self.usd_per_gpu_hour is None or not self.gpu):
            raise ValueError("kind dedicated needs usd_per_gpu_hour and gpu")
        return self

    def label(self) -> str:
        if self.kind == "dedicated":
            return f"{self.host} dedicated ({usd_rate(self.usd_per_gpu_hour or 0)}/GPU-h, {self.gpu})"
        markup = "the base price" if self.base_price_markup == 1 else f"{self.base_price_markup:g}x the base price"
        fee = f" + {usd_rate(self.usd_per_adapter_month)}/adapter-month" if self.usd_per_adapter_month else ""
        return f"{self.host} serverless LoRA ({markup}{fee})"


Row = TypeVar("Row", "GpuPrice", "ProviderPrice")


@dataclass(frozen=True)
class PriceCatalog:
    gpus: tuple[GpuPrice, ...]
    providers: tuple[ProviderPrice, ...]
    origins: tuple[str, ...] = ()
    finetunes: tuple[FinetunePrice, ...] = ()  # how hosts bill LoRA fine-tunes

    def as_of(self, today: date) -> PriceCatalog:
        """The catalog on `today`: a row retrieved more than MAX_DEFAULT_AGE_DAYS before it is no longer picked by
        a GPU name or a model id (it can still be named by its id), however recent the catalog file is."""
        def aged(row: Row) -> Row:
            old = row.retrieved is not None and (today - row.retrieved).days > MAX_DEFAULT_AGE_DAYS
            return row.model_copy(update={"default": False}) if old and row.default else row

        return replace(self, gpus=tuple(aged(r) for r in self.gpus), providers=tuple(aged(r) for r in self.providers))

    def gpu(self, name: str, pricing: PricingKind = "on-demand") -> GpuPrice:
        """A row id (any row), or a GPU name: the median-priced default row of that pricing kind (lower median)
        among single-GPU rows; 8-GPU node shares count only where no single-GPU row has a price."""
        by_id = {row.id: row for row in self.gpus}
        if name in by_id:
            return by_id[name]
        gpu = GPU_ALIASES.get(name.lower(), name.lower())
        rows = self.gpu_pool(gpu, pricing)
        if rows:
            return rows[(len(rows) - 1) // 2]
        others = [r for r in self.gpus if r.gpu == gpu and r.pricing == pricing]
        if others:
            raise PriceError(f"--gpu {name}: the catalog's {pricing} prices for {gpu} are history or undated "
                             f"only; name one by its id ({', '.join(r.id for r in others)}) or give --gpu-price")
        if any(r.gpu == gpu for r in self.gpus):
            kinds = sorted({r.pricing for r in self.gpus if r.gpu == gpu})
            committed = "" if pricing not in RESERVED_KINDS else (
                "; the shipped prices have no hyperscaler commitment (GCP committed use, AWS savings plans): give "
                "--gpu-price or add your quote with --prices")
            raise PriceError(f"--gpu {name}: no {pricing} price for {gpu}; the catalog has {', '.join(kinds)}"
                             + committed)
        raise PriceError(f"unknown GPU '{name}'{_did_you_mean(name, [*self.gpu_names(), *by_id])}; known GPUs: "
                         f"{', '.join(self.gpu_names())} (or a price row id such as {self.gpus[0].id}, "
                         f"or your own price with --gpu-price)")

    def gpu_pool(self, gpu: str, pricing: PricingKind) -> list[GpuPrice]:
        """The rows a GPU name chooses among, cheapest first: default rows of the kind, single-GPU ones when any."""
        gpu = GPU_ALIASES.get(gpu.lower(), gpu.lower())
        rows = [r for r in self.gpus if r.gpu == gpu and r.pricing == pricing and r.is_default]
        single = [r for r in rows if r.gpus_per_node == 1]
        return sorted(single or rows, key=lambda r: (r.usd_per_gpu_hour, r.id))

    def gpu_rows(self, gpu: str) -> list[GpuPrice]:
        gpu = GPU_ALIASES.get(gpu.lower(), gpu.lower())
        return [r for r in self.gpus if r.gpu == gpu]

    def gpu_names(self) -> list[str]:
        return sorted({r.gpu for r in self.gpus})

    def priceable(self) -> dict[str, list[str]]:
        """Each pricing kind's GPU names that pick a row (dated, current; on the day of `as_of`)."""
        kinds: dict[str, set[str]] = {}
        for row in self.gpus:
            if row.is_default:
                kinds.setdefault(row.pricing, set()).add(row.gpu)
        return {kind: sorted(names) for kind, names in sorted(kinds.items())}

    def provider_rows(self, names: Iterable[str]) -> list[ProviderPrice]:
        """Each name is a row id (`together/llama-3.1-8b`: that row, whatever its date) or a model id
        (`llama-3.1-8b`: its hosts' default rows)."""
        chosen: dict[str, ProviderPrice] = {}
        for name in names:
            rows = [r for r in self.providers if r.id == name]
            if not rows:
                of_model = [r for r in self.providers if r.model == name]
                rows = [r for r in of_model if r.is_default]
                if of_model and not rows:
                    raise PriceError(f"--provider {name}: the catalog's prices for this model are history, undated "
                                     f"or over a year old; name a row by its id ({', '.join(r.id for r in of_model)})")
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
    finetunes: dict[str, FinetunePrice] = {}
    origins = []
    for name in SHIPPED_FILES:
        text = (resources.files("costmodel") / "prices" / name).read_text()
        _merge(parse_price_file(text, f"costmodel/prices/{name}"), gpus, providers, finetunes)
        origins.append(f"costmodel/prices/{name}")
    for path in extra_files:
        if not Path(path).is_file():
            raise PriceError(f"--prices {path}: no such file")
        _merge(parse_price_file(read_text(Path(path), PriceError), str(path)), gpus, providers, finetunes)
        origins.append(str(path))
    return PriceCatalog(tuple(gpus.values()), tuple(providers.values()), tuple(origins), tuple(finetunes.values()))


def _merge(catalog: PriceCatalog, gpus: dict[str, GpuPrice], providers: dict[str, ProviderPrice],
           finetunes: dict[str, FinetunePrice]) -> None:
    gpus.update((row.id, row) for row in catalog.gpus)
    providers.update((row.id, row) for row in catalog.providers)
    finetunes.update((row.id, row) for row in catalog.finetunes)


def parse_price_file(text: str, origin: str) -> PriceCatalog:
    expected = "a mapping with `gpus`, `providers` and/or `finetunes` lists of rows"
    raw = parse_yaml_mapping(text, origin, PriceError, expected)
    if not set(raw) <= {"gpus", "providers", "finetunes"} or not raw:
        raise PriceError(f"{origin}: expected {expected}")
    gpus = tuple(_rows(raw.get("gpus") or [], GpuPrice, origin, "gpus"))
    providers = tuple(_rows(raw.get("providers") or [], ProviderPrice, origin, "providers"))
    finetunes = tuple(_rows(raw.get("finetunes") or [], FinetunePrice, origin, "finetunes"))
    return PriceCatalog(gpus, providers, (origin,), finetunes)


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
    """Dated rows retrieved more than `max_age_days` before `today`, oldest first (a month-only date counts
    from the month's first day). Undated rows are not here: `undated_prices` names them."""
    stale = [StalePrice(r.id, r.retrieved, (today - r.retrieved).days) for r in rows
             if r.retrieved is not None and (today - r.retrieved).days > max_age_days]
    return sorted(stale, key=lambda s: (-s.age_days, s.id))


def undated_prices(rows: Iterable[GpuPrice | ProviderPrice]) -> list[str]:
    """The ids of rows whose source gives no date (chosen by id: a name never picks them)."""
    return sorted(r.id for r in rows if r.retrieved is None)
