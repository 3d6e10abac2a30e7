"""Command-line flags layered over a scenario: a flag given on the command line wins over the file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from bench.flags import MeasureFlags
from bench.scenario import Scenario, ScenarioError, load_scenario
from common.validation import describe_validation_error
from loadgen.workload import parse_length_spec


@dataclass(frozen=True)
class LoadOverrides:
    """The flags that set which levels run (the rest come with every measuring command: MeasureFlags)."""

    concurrency: str | None = None
    rate: str | None = None
    burstiness: float | None = None
    max_concurrency: int | None = None


def parse_levels_flag(flag: str, text: str, kind: type[int] | type[float]) -> list[Any]:
    """`1,8,50` -> [1, 8, 50]; a clear error naming the flag otherwise."""
    what = "whole numbers >= 1" if kind is int else "numbers > 0"
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{flag} {text}: expected comma-separated {what}, e.g. 1,8,50") from None
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"{flag} {text}: expected comma-separated {what}, e.g. 1,8,50")
    return values


def build_scenario(name_or_path: str, flags: MeasureFlags, levels: LoadOverrides | None = None) -> Scenario:
    """The scenario with the command line's flags over it."""
    scenario = load_scenario(name_or_path)
    workload = scenario.workload.model_dump()
    load = scenario.load.model_dump()
    levels = levels or LoadOverrides()
    if levels.concurrency is not None or levels.rate is not None:
        load["concurrency"] = parse_levels_flag("--concurrency", levels.concurrency, int) if levels.concurrency else []
        load["rates"] = parse_levels_flag("--rate", levels.rate, float) if levels.rate else []
    for key, value in (("burstiness", levels.burstiness), ("max_concurrency", levels.max_concurrency),
                       ("duration_s", flags.duration), ("requests", flags.requests),
                       ("warmup_requests", flags.warmup), ("request_timeout_s", flags.request_timeout)):
        if value is not None:
            load[key] = value
    if flags.requests is not None and flags.duration is None:
        load["duration_s"] = None  # --requests alone means: exactly that many requests
    if flags.input_tokens is not None:
        workload["input_tokens"] = parse_length_spec(flags.input_tokens).model_dump()
    if flags.output_tokens is not None:
        workload["output_tokens"] = parse_length_spec(flags.output_tokens).model_dump()
    if flags.shared_prefix is not None:
        workload["shared_prefix"] = _parse_shared_prefix(flags.shared_prefix)
    if flags.turns is not None:
        if flags.turns < 1:
            raise ValueError(f"--turns {flags.turns}: expected a whole number >= 1 (turns per conversation)")
        workload["multi_turn"] = {"turns": flags.turns} if flags.turns > 1 else None
    if flags.api is not None:
        workload["api"] = flags.api
    if flags.seed is not None:
        workload["seed"] = flags.seed
    try:
        return Scenario.model_validate({**scenario.model_dump(), "workload": workload, "load": load})
    except ValidationError as exc:
        raise ScenarioError(f"bad flag: {describe_validation_error(exc)}") from None


def _parse_shared_prefix(text: str) -> dict[str, int]:
    try:
        groups, tokens = (int(part) for part in text.split(":"))
    except ValueError:
        raise ValueError(f"--shared-prefix {text}: expected GROUPS:TOKENS, e.g. 4:1000") from None
    return {"groups": groups, "tokens": tokens}
