"""Command-line flags layered over a scenario: a flag given on the command line wins over the file."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench.inputs.flag_text import given_flags, key_value, listed
from bench.inputs.measure_options import MeasureFlags
from bench.inputs.scenario import Scenario, ScenarioError, load_scenario
from common.validation import describe_validation_error
from loadgen.replay.formats import is_trace_file
from loadgen.workload import parse_length_spec


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
                       ("warmup_requests", flags.warmup), ("request_timeout_s", flags.request_timeout),
                       ("on_throttle", flags.on_throttle), ("sessions", flags.sessions),
                       ("max_think_s", flags.max_think_s)):
        if value is not None:
            load[key] = value
    if (flags.requests is not None or flags.sessions is not None) and flags.duration is None:
        load["duration_s"] = None  # --requests (--sessions) alone means: exactly that many
    if flags.input_tokens is not None:
        workload["input_tokens"] = parse_length_spec(flags.input_tokens).model_dump()
    if flags.output_tokens is not None:
        workload["output_tokens"] = parse_length_spec(flags.output_tokens).model_dump()
    if flags.shared_prefix is not None:
        workload["shared_prefix"] = _parse_shared_prefix(flags.shared_prefix)
    if flags.turns is not None and flags.turns < 1:
        raise ValueError(f"--turns {flags.turns}: expected a whole number >= 1 (turns per conversation)")
    dataset = _dataset_settings(flags, workload.get("dataset"))
    workload["dataset"] = dataset
    if flags.turns is not None and dataset is None:
        workload["multi_turn"] = {"turns": flags.turns} if flags.turns > 1 else None
    if flags.keep_text:
        workload["keep_text"] = True
    if flags.workload is not None:
        if flags.workload != "agent":
            raise ValueError(f"--workload {flags.workload}: the one workload named so is 'agent' (synthetic agent "
                             "sessions); other workloads come from --scenario or --dataset")
        workload["agent"] = workload.get("agent") or {}
    sessions_from_flags = flags.workload is not None or (flags.dataset is not None and _is_sessions(dataset))
    if sessions_from_flags and levels.concurrency is None and levels.rate is None:
        raise ValueError("agent sessions need a load: add --concurrency N (N sessions alive at once, e.g. "
                         "--concurrency 1,4,16) or --rate R (R sessions starting per second, e.g. --rate 0.5)")
    if flags.dataset is not None and dataset is not None and levels.concurrency is None and levels.rate is None \
            and is_trace_file(Path(dataset["path"]), dataset.get("format")):
        load["concurrency"], load["rates"] = [], []  # a trace is a level of its own: replayed once
    adapters = _adapter_settings(flags, workload.get("adapters"))
    if adapters is not None:
        workload["adapters"] = adapters
    if flags.api is not None:
        workload["api"] = flags.api
    if flags.seed is not None:
        workload["seed"] = flags.seed
    try:
        return Scenario.model_validate({**scenario.model_dump(), "workload": workload, "load": load})
    except ValidationError as exc:
        raise ScenarioError(f"bad flag: {describe_validation_error(exc)}") from None


def _adapter_settings(flags: MeasureFlags, scenario_adapters: dict[str, Any] | None) -> dict[str, Any] | None:
    """workload.adapters with the adapter flags over it; a bad value names the flag."""
    given = (flags.adapters, flags.adapters_dir, flags.lora, flags.adapter_mix, flags.adapter_counts)
    if all(value is None for value in given):
        return scenario_adapters
    settings = dict(scenario_adapters or {})
    if flags.adapters is not None:
        settings["names"] = listed(flags.adapters)
        if not settings["names"]:
            raise ValueError(f"--adapters {flags.adapters!r}: expected NAME,NAME,... (adapters the engine serves)")
    if flags.adapters_dir is not None:
        settings["dir"] = str(flags.adapters_dir.resolve())
    if flags.lora:
        modules = dict(settings.get("modules") or {})
        for item in flags.lora:
            name, path = key_value(item)
            if not name or not path:
                raise ValueError(f"--lora {item!r}: expected NAME=PATH (a PEFT LoRA folder, e.g. sql=adapters/sql)")
            modules[name] = str(Path(path).resolve())
        settings["modules"] = modules
    if flags.adapter_mix is not None:
        settings["mix"] = flags.adapter_mix
    if flags.adapter_counts is not None:
        try:
            counts = [int(part) for part in listed(flags.adapter_counts)]
        except ValueError:
            counts = []
        if not counts or any(n < 0 for n in counts):
            raise ValueError(f"--adapter-counts {flags.adapter_counts}: expected comma-separated whole numbers "
                             ">= 0, e.g. 1,4,16 (the base model alone is measured too)")
        settings["counts"] = counts
    if not (settings.get("names") or settings.get("dir") or settings.get("modules")):
        raise ValueError("--adapter-mix / --adapter-counts: name the adapters too (--adapters NAME,..., "
                         "--adapters-dir DIR or --lora NAME=PATH)")
    return settings


def _is_sessions(dataset: dict[str, Any] | None) -> bool:
    from loadgen.sessions.detect import SESSION_FORMATS, is_session_path

    if dataset is None:
        return False
    return dataset["format"] in SESSION_FORMATS if dataset.get("format") else is_session_path(dataset["path"])


def _dataset_settings(flags: MeasureFlags, scenario_dataset: dict[str, Any] | None) -> dict[str, Any] | None:
    """workload.dataset: the scenario's, with the --dataset flags over it."""
    if flags.dataset is None and scenario_dataset is None:
        given = [name for name, value in (("--dataset-format", flags.dataset_format),
                                          ("--dataset-sample", flags.dataset_sample),
                                          ("--dataset-turns", flags.dataset_turns),
                                          ("--max-input-tokens", flags.max_input_tokens),
                                          ("--time-scale", flags.time_scale), ("--trace-window", flags.trace_window))
                 if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} need(s) --dataset FILE (or workload.dataset in the scenario)")
        return None
    dataset = dict(scenario_dataset or {})
    if flags.dataset is not None and not flags.dataset.exists():
        raise ValueError(f"--dataset {flags.dataset}: no such file or directory")
    if flags.dataset is not None:
        dataset = {"path": str(flags.dataset.resolve())}  # a new file: none of the scenario's file settings
    for key, value in (("format", flags.dataset_format), ("sample", flags.dataset_sample),
                       ("max_input_tokens", flags.max_input_tokens), ("time_scale", flags.time_scale)):
        if value is not None:
            dataset[key] = value
    if flags.dataset_turns is not None:
        dataset["turns"] = _parse_turns(flags.dataset_turns)
    elif flags.turns is not None:
        dataset["turns"] = flags.turns if flags.turns > 1 else None
    if flags.trace_window is not None:
        dataset["window"] = _parse_window(flags.trace_window)
    return dataset


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


def _parse_shared_prefix(text: str) -> dict[str, int]:
    try:
        groups, tokens = (int(part) for part in text.split(":"))
    except ValueError:
        raise ValueError(f"--shared-prefix {text}: expected GROUPS:TOKENS, e.g. 4:1000") from None
    return {"groups": groups, "tokens": tokens}
