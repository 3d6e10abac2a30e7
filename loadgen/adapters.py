"""Traffic across LoRA adapters: each request asks for one adapter of a mix, as its `model`.

    mix = AdapterMix.parse(["sql", "chat", "code"], "zipf:1.1", seed=0)
    mix.pick(17)                   # the adapter of request (or conversation) 17: the same for every run of the seed
    specs = with_adapters(specs, mix.first(2))   # a level of the first two adapters only (`--adapter-counts`)

A mix is `uniform`, `zipf:S` (the i-th adapter's weight 1 / i^S: a few hot adapters and a long tail, as
multi-tenant traffic has) or `weights:W1,W2,...` (one per adapter, in order; or `weights:NAME=W,...`). The pick
is seeded by the request's key alone (its conversation's, in a multi-turn chat, so that a conversation keeps
its adapter), never by the order requests are sent in: workers and resumed runs pick alike. This module knows
nothing of engines or HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from common.names import UnsafeNameError, check_adapter_name
from loadgen.arrivals import parse_label
from loadgen.types import AdapterCount, LevelSummary, RequestSpec

MIX_FORMS = "uniform, zipf:S (S > 0) or weights:W1,W2,... (one weight per adapter, or NAME=W,...)"
_TABLE_CHUNK = 4096


class AdapterMixError(ValueError):
    """A mix that can't be used; the message names the flag's value and what is accepted."""


@dataclass(frozen=True)
class AdapterMix:
    """Adapter names, their shares (summing to 1) and the seed of the picks."""

    names: tuple[str, ...]
    shares: tuple[float, ...]
    seed: int = 0
    spec: str = "uniform"  # as given, for run.json

    @classmethod
    def parse(cls, names: Sequence[str], spec: str = "uniform", seed: int = 0) -> AdapterMix:
        names = tuple(names)
        if not names:
            raise AdapterMixError("no adapters to mix: give --adapters NAME,... or --adapters-dir DIR")
        if len(set(names)) != len(names):
            raise AdapterMixError(f"adapters {', '.join(names)}: a name is given twice")
        kind, _, value = spec.partition(":")
        weights: np.ndarray
        if kind == "uniform" and not value:
            weights = np.ones(len(names))
        elif kind == "zipf":
            try:
                exponent = float(value)
            except ValueError:
                raise AdapterMixError(f"--adapter-mix {spec}: expected {MIX_FORMS}") from None
            if exponent <= 0:
                raise AdapterMixError(f"--adapter-mix {spec}: the exponent S must be > 0 (zipf:1.1, for instance)")
            weights = 1.0 / np.arange(1, len(names) + 1) ** exponent
        elif kind == "weights":
            weights = _weights(value, names, spec)
        else:
            raise AdapterMixError(f"--adapter-mix {spec}: expected {MIX_FORMS}")
        return cls(names, tuple(float(w) for w in weights / weights.sum()), seed, spec)

    def first(self, count: int) -> AdapterMix:
        """The mix of the first `count` adapters, their weights renormalized (the same picks' seed)."""
        if not 1 <= count <= len(self.names):
            raise AdapterMixError(f"--adapter-counts {count}: expected 1 to {len(self.names)} (the adapters given)")
        shares = np.array(self.shares[:count])
        return replace(self, names=self.names[:count], shares=tuple(float(s) for s in shares / shares.sum()))

    def pick(self, key: int) -> str:
        """The adapter of request (or conversation) `key`: a seeded draw from the shares, the same every time."""
        return self.names[int(np.searchsorted(self._bounds, _uniforms(self.seed, key), side="right"))]

    @cached_property
    def _bounds(self) -> np.ndarray:
        """The cumulative shares a uniform draw is placed among (once per mix: a pick is per request)."""
        return np.cumsum(self.shares)[:-1]

    def describe(self) -> str:
        shown = ", ".join(f"{n} {s:.0%}" for n, s in zip(self.names[:6], self.shares[:6], strict=False))
        more = f", ... ({len(self.names)} in all)" if len(self.names) > 6 else ""
        return f"{self.spec}: {shown}{more}"


def _weights(text: str, names: tuple[str, ...], spec: str) -> np.ndarray:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    named = all("=" in part for part in parts)
    try:
        if named:
            given = {name.strip(): float(weight) for name, _, weight in (p.partition("=") for p in parts)}
            unknown = sorted(set(given) - set(names))
            if unknown:
                raise AdapterMixError(f"--adapter-mix {spec}: {', '.join(unknown)} is not among the adapters "
                                      f"({', '.join(names)})")
            weights = np.array([given.get(name, 0.0) for name in names])
        else:
            weights = np.array([float(part) for part in parts])
    except ValueError as exc:
        if isinstance(exc, AdapterMixError):
            raise
        raise AdapterMixError(f"--adapter-mix {spec}: expected {MIX_FORMS}") from None
    if not named and len(weights) != len(names):
        raise AdapterMixError(f"--adapter-mix {spec}: {len(weights)} weights for {len(names)} adapters "
                              f"({', '.join(names)})")
    if (weights < 0).any() or weights.sum() <= 0:
        raise AdapterMixError(f"--adapter-mix {spec}: weights must be >= 0, and not all 0")
    return weights


_UNIFORMS: dict[int, np.ndarray] = {}


def _uniforms(seed: int, key: int) -> float:
    """The `key`-th draw of the seed's uniform stream, drawn in chunks (so a draw never depends on the order asked)."""
    table = _UNIFORMS.get(seed)
    if table is None or key >= len(table):
        size = max(_TABLE_CHUNK, (key // _TABLE_CHUNK + 1) * _TABLE_CHUNK)
        table = np.random.default_rng([seed, 0xADA]).random(size)  # one stream: a longer table extends the same one
        _UNIFORMS[seed] = table
    return float(table[key])


def with_adapters(specs: Iterator[RequestSpec], mix: AdapterMix | None) -> Iterator[RequestSpec]:
    """The requests, each asking for its adapter of `mix` (by its conversation, else its own id); none: the base
    model (a level of `--adapter-counts 0`)."""
    for spec in specs:
        key = spec.conversation_id if spec.conversation_id is not None else spec.request_id
        adapter = mix.pick(key) if mix is not None else None
        yield spec if spec.adapter == adapter else replace(spec, adapter=adapter)


ADAPTER_CONFIG = "adapter_config.json"  # what marks a folder as a PEFT adapter


@dataclass(frozen=True)
class AdapterPlan:
    """A run's adapters: those an engine bench starts is given (name -> folder), the traffic's mix, and the
    counts of the sweep's adapter dimension (None: every level asks the whole mix)."""

    served: dict[str, str]
    mix: AdapterMix
    counts: tuple[int, ...] | None = None

    def mix_for(self, count: int | None) -> AdapterMix | None:
        """A level's mix: the whole one (no count), the first `count` adapters, or none (0: the base model)."""
        if count is None:
            return self.mix
        return self.mix.first(count) if count else None


def plan_adapters(settings: object, seed: int) -> AdapterPlan | None:
    """`workload.adapters` (`loadgen.workload.AdapterSettings`) resolved: the folder's adapters found, the mix
    parsed; errors name the setting (as its flag) and what would be accepted."""
    if settings is None:
        return None
    from loadgen.workload import AdapterSettings

    assert isinstance(settings, AdapterSettings)
    served = dict(settings.modules)
    if settings.dir is not None:
        folder = Path(settings.dir)
        if not folder.is_dir():
            raise AdapterMixError(f"--adapters-dir {folder}: not a folder")
        found = {p.name: str(p) for p in sorted(folder.iterdir()) if (p / ADAPTER_CONFIG).is_file()}
        if not found:
            raise AdapterMixError(f"--adapters-dir {folder}: no adapter in it (a subfolder holding {ADAPTER_CONFIG} "
                                  "each; `bench lora make` writes some)")
        for name in found:
            _check_name(name, f"--adapters-dir {folder}")
        served = {**found, **served}
    for name, path in served.items():
        _check_name(name, f"--lora {name}={path} (workload.adapters.modules)")
        if not (Path(path) / ADAPTER_CONFIG).is_file():
            raise AdapterMixError(f"--lora {name}={path}: no {ADAPTER_CONFIG} there (a PEFT LoRA folder)")
    names = settings.names or list(served)
    mix = AdapterMix.parse(names, settings.mix, seed)
    counts = None
    if settings.counts is not None:
        too_many = [n for n in settings.counts if n > len(names)]
        if too_many:
            raise AdapterMixError(f"--adapter-counts {','.join(map(str, settings.counts))}: {too_many[0]} is more "
                                  f"than the {len(names)} adapters given")
        counts = tuple(dict.fromkeys([0, *sorted(settings.counts)]))  # the base model alone first: the yardstick
    return AdapterPlan(served, mix, counts)


def _check_name(name: str, source: str) -> None:
    """An adapter bench serves is named in engine flags (`NAME=PATH`) and a container's mount (/adapters/NAME)."""
    try:
        check_adapter_name(name, source)
    except UnsafeNameError as exc:
        raise AdapterMixError(str(exc)) from None


def adapter_counts(summaries: Sequence[LevelSummary]) -> list[AdapterCount]:
    """The levels of an adapter-count sweep (`c16+a4`), each against the base model alone (`c16+a0`) at the same
    load and repeat: what the extra adapters cost in throughput and TTFT p95."""
    base = {(s.engine, s.target, s.repeat): s for s in summaries if parse_label(s.level).adapters == 0}
    rows = []
    for s in summaries:
        count = parse_label(s.level).adapters
        if count is None:
            continue
        ref = base.get((s.engine, s.target, s.repeat))
        out, ttft = s.throughput.output_tokens_per_s, s.latency.ttft_ms.p95
        ref_out = ref.throughput.output_tokens_per_s if ref else None
        ref_ttft = ref.latency.ttft_ms.p95 if ref else None
        rows.append(AdapterCount(s.level, count, out, out / ref_out if ref_out else None, ttft,
                                 ttft / ref_ttft if ttft and ref_ttft else None))
    return rows
