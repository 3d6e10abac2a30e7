"""Scenarios: a workload, how to load it, and the SLOs it is judged by, from YAML, validated.

A scenario is a file path or the name of one shipped in `scenarios/` (e.g. `chat`). Errors name the file
and the field, and say what would be accepted.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bench.inputs.rules import Rules
from common.validation import parse_yaml_mapping, read_text, validate
from costmodel.inputs import Pricing, Requirements, Traffic
from loadgen.types import SLO
from loadgen.workload import Workload


class ScenarioError(Exception):
    pass


class LoadSettings(BaseModel):
    """Which levels to run and when each one stops."""

    model_config = ConfigDict(extra="forbid")

    concurrency: list[int] = Field(default_factory=lambda: [1, 8, 32])
    rates: list[float] = Field(default_factory=list)
    duration_s: float | None = Field(default=30.0, gt=0)
    requests: int | None = Field(default=None, ge=1)
    warmup_requests: int | None = Field(default=None, ge=0)
    request_timeout_s: float = Field(default=600.0, gt=0)
    # A 429: end the request (fail) or wait as asked and send it again (retry). Default: retry when a sweep
    # measures an endpoint (a provider's limit is part of what it sells), fail for a capacity search.
    on_throttle: Literal["fail", "retry"] | None = None
    burstiness: float = Field(default=1.0, gt=0)
    max_concurrency: int | None = Field(default=None, ge=1)
    sessions: int | None = Field(default=None, ge=1)  # agent sessions: a level ends when this many completed
    max_think_s: float = Field(default=10.0, ge=0)  # agent sessions: the longest wait before a call

    @field_validator("concurrency")
    @classmethod
    def _positive_concurrency(cls, values: list[int]) -> list[int]:
        if any(v < 1 for v in values):
            raise ValueError("every concurrency level must be >= 1")
        return values

    @field_validator("rates")
    @classmethod
    def _positive_rates(cls, values: list[float]) -> list[float]:
        if any(v <= 0 for v in values):
            raise ValueError("every rate must be > 0 requests/s")
        return values


class DecisionSettings(BaseModel):
    """Everything a decision takes from a scenario: the SLO it is judged by, traffic, pricing, requirements."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slo: SLO = Field(default_factory=SLO)
    traffic: Traffic | None = None
    pricing: Pricing = Field(default_factory=Pricing)
    requirements: Requirements = Field(default_factory=Requirements)

    def with_overrides(self, gpu: str | None = None, gpu_usd_per_hour: float | None = None,
                       gpus_per_replica: int | None = None, providers: list[str] | None = None,
                       monthly_tokens: float | None = None, peak_to_average: float | None = None,
                       hours_per_month: float | None = None, ops_usd_per_month: float | None = None,
                       gpu_pricing: str | None = None, headroom: float | None = None,
                       spare_replicas: int | None = None, cache_hit_rate: float | None = None,
                       uses_batch_api: bool | None = None, monthly_tasks: float | None = None,
                       min_accuracy: float | None = None, owned: dict[str, str] | None = None,
                       min_validity: float | None = None) -> DecisionSettings:
        """Command-line flags over the scenario: a flag given wins; `--gpu` alone drops the scenario's own
        price, `--peak-to-average` or `--hours` its hourly profile. Raises pydantic's ValidationError."""
        pricing: dict[str, object] = {}
        if gpu is not None:
            pricing.update(gpu=gpu, gpu_usd_per_hour=None)
        if owned:  # each field given over the scenario's own hardware (checked by name: unknown keys are refused)
            given = self.pricing.owned.model_dump(exclude_unset=True) if self.pricing.owned else {}
            pricing["owned"] = {**given, **owned}
        for key, value in (("gpu_usd_per_hour", gpu_usd_per_hour), ("gpus_per_replica", gpus_per_replica),
                           ("providers", providers or None), ("ops_usd_per_month", ops_usd_per_month),
                           ("gpu_pricing", gpu_pricing), ("headroom", headroom), ("spare_replicas", spare_replicas)):
            if value is not None:
                pricing[key] = value
        traffic: dict[str, object] = (self.traffic or Traffic()).model_dump()
        if monthly_tokens is not None:
            traffic.update(monthly_tokens=monthly_tokens, monthly_input_tokens=None, monthly_output_tokens=None)
        traffic.update({k: v for k, v in (("cache_hit_rate", cache_hit_rate), ("uses_batch_api", uses_batch_api),
                                          ("monthly_tasks", monthly_tasks)) if v is not None})
        if peak_to_average is not None or hours_per_month is not None:
            traffic.update(hourly_profile=None, days_per_month=None)
            traffic.update({k: v for k, v in (("peak_to_average", peak_to_average),
                                               ("hours_per_month", hours_per_month)) if v is not None})
        changed = traffic != (self.traffic or Traffic()).model_dump()
        floors = {k: v for k, v in (("min_accuracy", min_accuracy), ("min_validity", min_validity)) if v is not None}
        requirements = Requirements.model_validate({**self.requirements.model_dump(), **floors}) if floors else \
            self.requirements
        return self.model_copy(update={
            "pricing": Pricing.model_validate({**self.pricing.model_dump(), **pricing}),
            "traffic": Traffic.model_validate(traffic) if changed else self.traffic, "requirements": requirements})


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    workload: Workload = Field(default_factory=Workload)
    load: LoadSettings = Field(default_factory=LoadSettings)
    slo: SLO = Field(default_factory=SLO)
    # The decision (costmodel.inputs): the traffic to serve, prices to use, reasons that override cost.
    traffic: Traffic | None = None
    pricing: Pricing = Field(default_factory=Pricing)
    requirements: Requirements = Field(default_factory=Requirements)
    rules: Rules | None = None  # a published benchmark's rules the run is held to (bench.inputs.rules)

    def decision_settings(self) -> DecisionSettings:
        return DecisionSettings(slo=self.slo, traffic=self.traffic, pricing=self.pricing,
                                requirements=self.requirements)

    @model_validator(mode="after")
    def _conversations_need_users(self) -> Scenario:
        dataset = self.workload.dataset
        if (self.workload.multi_turn is not None or (dataset is not None and dataset.multi_turn)) and self.load.rates:
            raise ValueError("workload.multi_turn runs with concurrency levels only (each user holds one "
                             "conversation at a time); remove load.rates / --rate")
        if self.load.sessions is not None and not self.workload.is_sessions:
            raise ValueError("load.sessions (--sessions) counts agent sessions: it needs a session dataset "
                             "(weka, tracelab, otel) or workload.agent (--workload agent)")
        return self


def shipped_scenarios() -> list[str]:
    return sorted(p.name.removesuffix(".yaml") for p in resources.files("scenarios").iterdir()
                  if p.name.endswith(".yaml"))


def load_scenario(name_or_path: str) -> Scenario:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ScenarioError(f"--scenario {name_or_path}: no such file")
        text, origin, directory = read_text(path, ScenarioError), str(path), path.parent
    elif name_or_path in shipped_scenarios():
        shipped = resources.files("scenarios") / f"{name_or_path}.yaml"
        text, origin, directory = shipped.read_text(), f"scenarios/{name_or_path}.yaml", Path(str(shipped)).parent
    else:
        raise ScenarioError(f"--scenario {name_or_path}: not a file, and not one of the shipped scenarios "
                            f"({', '.join(shipped_scenarios())})")
    return parse_scenario(text, origin, directory)


def parse_scenario(text: str, origin: str, directory: Path | None = None) -> Scenario:
    """The scenario in `text`; a dataset's relative path is taken from `directory` (the scenario file's)."""
    raw = parse_yaml_mapping(text, origin, ScenarioError, "a mapping with name, workload, load and slo")
    scenario = validate(Scenario, raw, origin, ScenarioError)
    dataset = scenario.workload.dataset
    if dataset is not None and directory is not None and not Path(dataset.path).is_absolute():
        resolved = dataset.model_copy(update={"path": str((directory / dataset.path).resolve())})
        scenario = scenario.model_copy(update={"workload": scenario.workload.model_copy(update={"dataset": resolved})})
    def resolve(path: str) -> str:
        assert directory is not None
        return path if Path(path).is_absolute() else str((directory / path).resolve())

    structured = scenario.workload.structured
    if structured is not None and directory is not None:  # the schema and tools files, from the scenario's
        resolved_structured = structured.model_copy(update={
            "json_schema": resolve(structured.json_schema) if structured.json_schema else None,
            "tools": resolve(structured.tools) if structured.tools else None})
        scenario = scenario.model_copy(update={
            "workload": scenario.workload.model_copy(update={"structured": resolved_structured})})
    adapters = scenario.workload.adapters
    if adapters is not None and directory is not None:  # the adapters' folders too, from the scenario's
        resolved_adapters = adapters.model_copy(update={
            "dir": resolve(adapters.dir) if adapters.dir else None,
            "modules": {name: resolve(path) for name, path in adapters.modules.items()}})
        scenario = scenario.model_copy(update={
            "workload": scenario.workload.model_copy(update={"adapters": resolved_adapters})})
    return scenario
