"""Command-line flags as `ScenarioOverrides` (bench.inputs.overrides), which go over the scenario: a flag given
wins over the file. Each flag's text is read here, and text that can't be read names the flag and what it
accepts; what the values may be together is the overrides' and the scenario's to say."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from bench.inputs.flag_text import given_flags, key_value, listed
from bench.inputs.measure_options import MeasureFlags
from bench.inputs.overrides import ScenarioOverrides
from loadgen.workload import SharedPrefix, parse_length_spec

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class LoadOverrides:
    """The flags that set which levels run (the rest come with every measuring command: MeasureFlags)."""

    concurrency: str | None = None
    rate: str | None = None
    burstiness: float | None = None
    max_concurrency: int | None = None

    def given(self) -> list[str]:
        """The level flags given, as --names (a resumed run takes none)."""
        return given_flags({f.name: (getattr(self, f.name), f.default) for f in fields(self)})


def parse_levels_flag(flag: str, text: str, kind: type[int] | type[float]) -> list[Any]:
    """`1,8,50` -> [1, 8, 50]; a clear error naming the flag otherwise."""
    what = "whole numbers >= 1" if kind is int else "numbers > 0"
    try:
        values = [kind(part) for part in listed(text)]
    except ValueError:
        raise ValueError(f"{flag} {text}: expected comma-separated {what}, e.g. 1,8,50") from None
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"{flag} {text}: expected comma-separated {what}, e.g. 1,8,50")
    return values


def scenario_overrides(flags: MeasureFlags, levels: LoadOverrides | None = None) -> ScenarioOverrides:
    """The command line's flags as typed overrides of a scenario; text a flag can't be read as names the flag."""
    levels = levels or LoadOverrides()
    if flags.workload is not None and flags.workload != "agent":
        raise ValueError(f"--workload {flags.workload}: the one workload named so is 'agent' (synthetic agent "
                         "sessions); other workloads come from --scenario or --dataset")
    return ScenarioOverrides(
        concurrency=_read(levels.concurrency, lambda text: _levels("--concurrency", text, int)),
        rates=_read(levels.rate, lambda text: _levels("--rate", text, float)),
        burstiness=levels.burstiness, max_concurrency=levels.max_concurrency, duration_s=flags.duration,
        requests=flags.requests, sessions=flags.sessions, warmup_requests=flags.warmup,
        request_timeout_s=flags.request_timeout, on_throttle=flags.on_throttle, max_think_s=flags.max_think_s,
        input_tokens=_read(flags.input_tokens, parse_length_spec),
        output_tokens=_read(flags.output_tokens, parse_length_spec),
        shared_prefix=_read(flags.shared_prefix, _parse_shared_prefix), turns=flags.turns, api=flags.api,
        seed=flags.seed, keep_text=flags.keep_text or None, agent=True if flags.workload == "agent" else None,
        dataset=flags.dataset, dataset_format=flags.dataset_format, dataset_sample=flags.dataset_sample,
        dataset_turns=_read(flags.dataset_turns, _parse_turns), max_input_tokens=flags.max_input_tokens,
        time_scale=flags.time_scale, trace_window=_read(flags.trace_window, _parse_window),
        adapters=_read(flags.adapters, _parse_adapter_names), adapters_dir=flags.adapters_dir,
        lora=_read(flags.lora, _parse_lora), adapter_mix=flags.adapter_mix,
        adapter_counts=_read(flags.adapter_counts, _parse_adapter_counts))


def _read(text: T | None, parse: Callable[[T], R]) -> R | None:
    """A flag's value read by `parse`; None when the flag was not given."""
    return None if text is None else parse(text)


def _levels(flag: str, text: str, kind: type[int] | type[float]) -> list[Any]:
    """--concurrency / --rate: given empty, no levels of that kind."""
    return parse_levels_flag(flag, text, kind) if text else []


def _parse_adapter_names(text: str) -> list[str]:
    names = listed(text)
    if not names:
        raise ValueError(f"--adapters {text!r}: expected NAME,NAME,... (adapters the engine serves)")
    return names


def _parse_lora(items: list[str]) -> dict[str, Path]:
    modules = {}
    for item in items:
        name, path = key_value(item)
        if not name or not path:
            raise ValueError(f"--lora {item!r}: expected NAME=PATH (a PEFT LoRA folder, e.g. sql=adapters/sql)")
        modules[name] = Path(path)
    return modules


def _parse_adapter_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in listed(text)]
    except ValueError:
        counts = []
    if not counts or any(n < 0 for n in counts):
        raise ValueError(f"--adapter-counts {text}: expected comma-separated whole numbers >= 0, e.g. 1,4,16 (the "
                         "base model alone is measured too)")
    return counts


def _parse_turns(text: str) -> int | str:
    if text.strip().lower() == "all":
        return "all"
    try:
        turns = int(text)
    except ValueError:
        turns = 0
    if turns < 1:
        raise ValueError(f"--dataset-turns {text}: expected a whole number >= 1 or 'all'")
    return turns


def _parse_window(text: str) -> tuple[float, float]:
    try:
        start, end = (float(part) for part in text.split(":"))
    except ValueError:
        raise ValueError(f"--trace-window {text}: expected START:END in seconds, e.g. 0:600") from None
    if not 0 <= start < end:
        raise ValueError(f"--trace-window {text}: expected 0 <= START < END")
    return start, end


def _parse_shared_prefix(text: str) -> SharedPrefix:
    try:
        groups, tokens = (int(part) for part in text.split(":"))
    except ValueError:
        raise ValueError(f"--shared-prefix {text}: expected GROUPS:TOKENS, e.g. 4:1000") from None
    return SharedPrefix.model_construct(groups=groups, tokens=tokens)  # checked with the scenario, by its name
