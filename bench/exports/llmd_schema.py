"""llm-d's Benchmark Report (version 0.1) as pydantic models, written from its documented fields: one report
describes one level (a point of a sweep): `scenario` (host, platform, model, load) and `metrics` (time,
requests, latency, throughput, service, resources). Every statistic names its units, and a statistic in the
wrong units is refused, as the format's own checks do.

One departure, said where the report is written: the format's `load.name` lists the load generators llm-d
runs (guidellm, inference-perf, vllm-benchmark, ...); this toolkit writes its own name there.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, model_validator

VERSION = "0.1"
Units = Literal["count", "percent", "fraction", "ms", "s", "MB", "GB", "MiB", "GiB", "MB/s", "GB/s", "ms/token",
                "s/token", "Watts"]
TIME_UNITS, PER_TOKEN_UNITS, COUNT_UNITS = ("ms", "s"), ("ms/token", "s/token"), ("count",)
MEMORY_UNITS, PORTION_UNITS, POWER_UNITS = ("MB", "GB", "MiB", "GiB"), ("percent", "fraction"), ("Watts",)


class _Model(BaseModel):
    """A part of the report; `UNITS` names the units each of its statistics may be in."""

    model_config = ConfigDict(extra="forbid")
    UNITS: ClassVar[dict[str, tuple[str, ...]]] = {}

    @model_validator(mode="after")
    def _units(self) -> _Model:
        for name, allowed in self.UNITS.items():
            value = getattr(self, name)
            if value is not None and value.units not in allowed:
                raise ValueError(f"{type(self).__name__.lower()}.{name}: units {value.units!r}, expected one of "
                                 f"{', '.join(allowed)}")
        return self


class Statistics(_Model):
    units: Units
    mean: float
    stddev: float | None = None
    min: float | None = None
    p10: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None



class Parallelism(_Model):
    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1


class Accelerator(_Model):
    model: str
    memory: float | None = None  # GB in one accelerator
    count: int
    parallelism: Parallelism | None = None
    metadata: Any = None


class Host(_Model):
    accelerator: list[Accelerator]
    type: list[Literal["replica", "prefill", "decode"]]
    metadata: Any = None


class Engine(_Model):
    name: str
    version: str | None = None
    args: dict[str, Any] = {}
    metadata: Any = None


class Platform(_Model):
    engine: list[Engine]
    metadata: Any = None


class ModelInfo(_Model):
    name: str
    quantization: str | None = None
    adapters: list[dict[str, str]] | None = None
    metadata: Any = None


class Load(_Model):
    name: str
    type: str | None = None
    args: dict[str, Any] | None = None
    metadata: Any = None


class Scenario(_Model):
    description: str | None = None
    host: Host | None = None
    platform: Platform | None = None
    model: ModelInfo
    load: Load
    metadata: Any = None


class Time(_Model):
    duration: float  # seconds
    start: float | None = None  # unix seconds
    stop: float | None = None
    metadata: Any = None


class Requests(_Model):
    total: int
    failures: int | None = None
    incomplete: int | None = None
    input_length: Statistics
    output_length: Statistics
    UNITS: ClassVar[dict[str, tuple[str, ...]]] = {"input_length": COUNT_UNITS, "output_length": COUNT_UNITS}


class Latency(_Model):
    time_to_first_token: Statistics
    normalized_time_per_output_token: Statistics | None = None
    time_per_output_token: Statistics | None = None
    inter_token_latency: Statistics | None = None
    request_latency: Statistics | None = None
    UNITS: ClassVar[dict[str, tuple[str, ...]]] = {"time_to_first_token": TIME_UNITS, "request_latency": TIME_UNITS,
                                                  "normalized_time_per_output_token": PER_TOKEN_UNITS,
                                                  "time_per_output_token": PER_TOKEN_UNITS,
                                                  "inter_token_latency": PER_TOKEN_UNITS}


class Throughput(_Model):
    input_tokens_per_sec: float | None = None
    output_tokens_per_sec: float | None = None
    total_tokens_per_sec: float
    requests_per_sec: float | None = None


class Service(_Model):
    batch_size: Statistics | None = None
    queue_size: Statistics | None = None
    kv_cache_size: Statistics | None = None
    metadata: Any = None
    UNITS: ClassVar[dict[str, tuple[str, ...]]] = {"batch_size": COUNT_UNITS, "queue_size": COUNT_UNITS,
                                                  "kv_cache_size": COUNT_UNITS}


class Memory(_Model):
    consumption: Statistics | None = None
    utilization: Statistics | None = None
    UNITS: ClassVar[dict[str, tuple[str, ...]]] = {"consumption": MEMORY_UNITS, "utilization": PORTION_UNITS}


class Compute(_Model):
    utilization: Statistics | None = None
    UNITS: ClassVar[dict[str, tuple[str, ...]]] = {"utilization": PORTION_UNITS}


class AcceleratorMetrics(_Model):
    memory: Memory | None = None
    compute: Compute | None = None
    power: Statistics | None = None
    UNITS: ClassVar[dict[str, tuple[str, ...]]] = {"power": POWER_UNITS}


class Resources(_Model):
    accelerator: list[AcceleratorMetrics]


class Metrics(_Model):
    time: Time
    requests: Requests
    latency: Latency
    throughput: Throughput
    service: Service | None = None
    resources: Resources | None = None
    description: str | None = None
    metadata: Any = None


class BenchmarkReport(_Model):
    version: Literal["0.1"] = VERSION
    scenario: Scenario
    metrics: Metrics
    metadata: Any = None

    @model_validator(mode="after")
    def _lists_correspond(self) -> BenchmarkReport:
        """host.accelerator, host.type, platform.engine and resources.accelerator go 1:1 where given."""
        lengths = {}
        if self.scenario.host is not None:
            lengths["scenario.host.accelerator"] = len(self.scenario.host.accelerator)
            lengths["scenario.host.type"] = len(self.scenario.host.type)
        if self.scenario.platform is not None:
            lengths["scenario.platform.engine"] = len(self.scenario.platform.engine)
        if self.metrics.resources is not None:
            lengths["metrics.resources.accelerator"] = len(self.metrics.resources.accelerator)
        if len(set(lengths.values())) > 1:
            raise ValueError(f"these lists must be as long as one another: {lengths}")
        return self
