"""Changes over a scenario, typed: `ScenarioOverrides` (each field None when not given) applied to a `Scenario`.

    build_scenario("chat", ScenarioOverrides(concurrency=[1, 8], requests=50))

The command line's flags become one (`bench.inputs.options.scenario_overrides`); a Python caller builds it
directly. Each section is changed with `model_copy(update=...)` and new parts are made unchecked
(`model_construct`); the scenario is then validated once, whole, so that a bad value is named by its place in
it (`workload.dataset.sample`) and the rules across sections (conversations and rates, sessions) still hold.
Errors name the flag a value came from (`--turns`, `--dataset`), as the command line has them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from bench.inputs.scenario import LoadSettings, Scenario, ScenarioError, load_scenario
from common.validation import describe_validation_error
from loadgen.replay.formats import is_trace_file
from loadgen.workload import (
    AdapterSettings,
    AgentWorkload,
    DatasetSettings,
    LengthDistribution,
    MultiTurn,
    SharedPrefix,
    Workload,
)


class ScenarioOverrides(BaseModel):
    """What to change in a scenario; None: keep the scenario's. Values the scenario checks (a format, an API,
    `on_throttle`) are plain text here and checked with the scenario."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # load: levels (either replaces both: concurrency alone runs no rates), and when a level ends
    concurrency: list[int] | None = None
    rates: list[float] | None = None
    burstiness: float | None = None
    max_concurrency: int | None = None
    duration_s: float | None = None  # requests or sessions given without it: no time limit
    requests: int | None = None
    sessions: int | None = None
    warmup_requests: int | None = None
    request_timeout_s: float | None = None
    on_throttle: str | None = None
    max_think_s: float | None = None
    # workload: synthetic requests
    input_tokens: LengthDistribution | None = None
    output_tokens: LengthDistribution | None = None
    shared_prefix: SharedPrefix | None = None
    turns: int | None = None  # conversations of this many turns; with a dataset, its turns (1: single requests)
    api: str | None = None
    seed: int | None = None
    keep_text: bool | None = None
    agent: bool | None = None  # synthetic agent sessions (the scenario's workload.agent, else its defaults)
    # workload.dataset: requests replayed from a file (a new file drops the scenario's file settings)
    dataset: Path | None = None
    dataset_format: str | None = None
    dataset_sample: int | None = None
    dataset_turns: int | Literal["all"] | None = None
    max_input_tokens: int | None = None
    time_scale: float | None = None
    trace_window: tuple[float, float] | None = None
    # workload.adapters: traffic across LoRA adapters
    adapters: list[str] | None = None
    adapters_dir: Path | None = None
    lora: dict[str, Path] | None = None  # NAME -> a PEFT folder
    adapter_mix: str | None = None
    adapter_counts: list[int] | None = None

    @property
    def has_levels(self) -> bool:
        return self.concurrency is not None or self.rates is not None


def build_scenario(name_or_path: str, overrides: ScenarioOverrides | None = None) -> Scenario:
    """The scenario (a file, or the name of a shipped one) with the overrides over it."""
    return apply_overrides(load_scenario(name_or_path), overrides or ScenarioOverrides())


def apply_overrides(scenario: Scenario, overrides: ScenarioOverrides) -> Scenario:
    """`scenario` with `overrides` over it: ValueError naming the flag for a combination that can't be, and
    ScenarioError ("bad flag: <field>: ...") for a value the scenario refuses."""
    workload = _workload_over(scenario.workload, overrides)
    dataset = workload.dataset
    is_new_sessions = overrides.agent or (overrides.dataset is not None and dataset is not None and dataset.is_sessions)
    if is_new_sessions and not overrides.has_levels:
        raise ValueError("agent sessions need a load: add --concurrency N (N sessions alive at once, e.g. "
                         "--concurrency 1,4,16) or --rate R (R sessions starting per second, e.g. --rate 0.5)")
    workload = workload.model_copy(update={"adapters": _adapters_over(workload.adapters, overrides)})
    load = _load_over(scenario.load, overrides, workload.dataset)
    try:
        return Scenario.model_validate(scenario.model_copy(update={"workload": workload, "load": load}).model_dump())
    except ValidationError as exc:
        raise ScenarioError(f"bad flag: {describe_validation_error(exc)}") from None


def _given(values: dict[str, Any]) -> dict[str, Any]:
    """The fields given (not None), for `model_copy(update=...)`."""
    return {name: value for name, value in values.items() if value is not None}


def _load_over(load: LoadSettings, overrides: ScenarioOverrides, dataset: DatasetSettings | None) -> LoadSettings:
    """load: the levels, and when each ends; a trace given on its own is a level of its own, replayed once."""
    update = _given({"burstiness": overrides.burstiness, "max_concurrency": overrides.max_concurrency,
                     "duration_s": overrides.duration_s, "requests": overrides.requests,
                     "warmup_requests": overrides.warmup_requests, "request_timeout_s": overrides.request_timeout_s,
                     "on_throttle": overrides.on_throttle, "sessions": overrides.sessions,
                     "max_think_s": overrides.max_think_s})
    if overrides.has_levels:
        update.update(concurrency=overrides.concurrency or [], rates=overrides.rates or [])
    elif overrides.dataset is not None and dataset is not None and is_trace_file(Path(dataset.path), dataset.format):
        update.update(concurrency=[], rates=[])
    if (overrides.requests is not None or overrides.sessions is not None) and overrides.duration_s is None:
        update["duration_s"] = None  # requests (sessions) alone means: exactly that many
    return load.model_copy(update=update)


def _workload_over(workload: Workload, overrides: ScenarioOverrides) -> Workload:
    """workload: lengths, prefix, conversations, the dataset, agent sessions, API and seed."""
    turns = overrides.turns
    if turns is not None and turns < 1:
        raise ValueError(f"--turns {turns}: expected a whole number >= 1 (turns per conversation)")
    dataset = _dataset_over(workload.dataset, overrides)
    update = _given({"input_tokens": overrides.input_tokens, "output_tokens": overrides.output_tokens,
                     "shared_prefix": overrides.shared_prefix, "keep_text": overrides.keep_text,
                     "api": overrides.api, "seed": overrides.seed})
    update["dataset"] = dataset
    if turns is not None and dataset is None:
        update["multi_turn"] = MultiTurn.model_construct(turns=turns) if turns > 1 else None
    if overrides.agent is not None:
        update["agent"] = (workload.agent or AgentWorkload()) if overrides.agent else None
    return workload.model_copy(update=update)


def _dataset_over(dataset: DatasetSettings | None, overrides: ScenarioOverrides) -> DatasetSettings | None:
    """workload.dataset: the scenario's, or a new file's, with the dataset's settings over it."""
    if overrides.dataset is not None:
        if not overrides.dataset.exists():
            raise ValueError(f"--dataset {overrides.dataset}: no such file or directory")
        dataset = DatasetSettings.model_construct(path=str(overrides.dataset.resolve()))  # none of the old file's
    if dataset is None:
        given = [flag for flag, value in (("--dataset-format", overrides.dataset_format),
                                          ("--dataset-sample", overrides.dataset_sample),
                                          ("--dataset-turns", overrides.dataset_turns),
                                          ("--max-input-tokens", overrides.max_input_tokens),
                                          ("--time-scale", overrides.time_scale),
                                          ("--trace-window", overrides.trace_window)) if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} need(s) --dataset FILE (or workload.dataset in the scenario)")
        return None
    update = _given({"format": overrides.dataset_format, "sample": overrides.dataset_sample,
                     "max_input_tokens": overrides.max_input_tokens, "time_scale": overrides.time_scale,
                     "window": overrides.trace_window})
    if overrides.dataset_turns is not None:
        update["turns"] = overrides.dataset_turns
    elif overrides.turns is not None:
        update["turns"] = overrides.turns if overrides.turns > 1 else None
    return dataset.model_copy(update=update)


def _adapters_over(adapters: AdapterSettings | None, overrides: ScenarioOverrides) -> AdapterSettings | None:
    """workload.adapters: the scenario's, with the adapter settings over it (--lora adds to its modules)."""
    given = (overrides.adapters, overrides.adapters_dir, overrides.lora, overrides.adapter_mix,
             overrides.adapter_counts)
    if all(value is None for value in given):
        return adapters
    settings = adapters or AdapterSettings.model_construct()
    update = _given({"names": overrides.adapters, "mix": overrides.adapter_mix, "counts": overrides.adapter_counts,
                     "dir": str(overrides.adapters_dir.resolve()) if overrides.adapters_dir is not None else None})
    if overrides.lora:
        update["modules"] = {**settings.modules, **{name: str(path.resolve()) for name, path in overrides.lora.items()}}
    settings = settings.model_copy(update=update)
    if not (settings.names or settings.dir or settings.modules):
        raise ValueError("--adapter-mix / --adapter-counts: name the adapters too (--adapters NAME,..., "
                         "--adapters-dir DIR or --lora NAME=PATH)")
    return settings
