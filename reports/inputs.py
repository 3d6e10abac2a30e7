"""What a report is made from: the decision, and each run as far as a reader needs it.

`bench.flows.report` fills these from run directories and the cost model; a report only lays them out, so it
reads no file and computes no figure of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from costmodel.types import CostCurve, Decision, FinetuneDecision, LevelBill, TaskDecision
from loadgen.types import AdapterCount, DatasetInfo, GpuView, LevelSummary, RepeatedLevel, ServerView, SessionLane
from reports.ui_overhead import UiLevel

# A JSON object as a file wrote it, which the report copies into report.json without reading it.
JsonObject = Mapping[str, object]


@dataclass(frozen=True)
class RunProvenance:
    """Where a run came from, from its run.json, as report.json's `runs` states it. The parts the report copies
    without reading (the tool, engine, endpoint and host records, the scenario's workload and load) stay as run.json
    wrote them."""

    run_id: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    source: str | None = None  # "measured here", or imported from which tool (and files)
    scenario: str | None = None  # the scenario's name
    levels_planned: tuple[str, ...] | None = None
    tool: JsonObject | None = None
    engine: JsonObject | None = None
    endpoint: JsonObject | None = None
    hardware: JsonObject | None = None
    workload: JsonObject | None = None
    load: JsonObject | None = None

    @property
    def is_imported(self) -> bool:
        """Made by another tool and imported (`bench import`): its record does not know the hardware."""
        return (self.source or "").startswith("imported")


@dataclass(frozen=True)
class GpuReading:
    """How the run read its GPUs while it ran (run.json's telemetry): the reader, or why none was read."""

    reader: str | None = None  # NVML or nvidia-smi
    why_not: str | None = None


@dataclass(frozen=True)
class UiPageSeen:
    """What a browser saw of the UI's page: a screenshot's file, the answer it showed and how long it took."""

    screenshot: str | None = None
    answer: str | None = None
    seconds: float | None = None
    why_not: str | None = None


@dataclass(frozen=True)
class ThroughUi:
    """A chat UI in front of the engine, the load sent through its chat API."""

    name: str | None = None
    version: str | None = None
    page: UiPageSeen | None = None


@dataclass(frozen=True)
class EngineKv:
    """The KV capacity the engine states (in its log) beside the plan's; where it states none, why not."""

    capacity_tokens: int | None
    plan_tokens: int
    ratio_to_plan: float | None
    source: str


@dataclass(frozen=True)
class PlanLevel:
    """One measured level beside the plan: its decode batch, the memory-bound ceiling there, and its share of it."""

    label: str
    mean_in_flight: float
    batch_size: int
    is_capped: bool  # more in flight than the sequences that fit: planned at all that fit
    decode_step_floor_ms: float
    ceiling_tokens_per_s: float  # every replica's together
    measured_output_tokens_per_s: float
    share_of_ceiling: float
    plan_kv_usage: float
    engine_kv_usage_max: float | None  # the engine's own /metrics, where it publishes them


@dataclass(frozen=True)
class RunPlan:
    """The memory plan of a run's model on its GPU (what `bench plan` gives), beside what the run measured."""

    model: str  # the `--model` the engine was launched with
    gpu: str  # the GPU catalog's key
    gpus_recorded: str  # the name the run recorded it under
    gpu_memory_gb: float
    gpu_bandwidth_tb_s: float
    tensor_parallel_size: int
    replicas: int
    memory_fraction: float
    context_tokens: int
    context_source: str
    weights_dtype: str
    weights_gb: float
    kv_bytes_per_token: int
    kv_tokens_that_fit: int
    sequences_that_fit: int
    engine_kv: EngineKv
    levels: tuple[PlanLevel, ...]
    assumptions: tuple[str, ...]


@dataclass(frozen=True)
class NoPlan:
    """Why a run launched here has no memory plan (no GPU, a GPU or model the plan can't read)."""

    why_not: str


@dataclass(frozen=True)
class ReportRun:
    """One run directory: its measured levels, what went missing, and where it came from."""

    run_dir: Path
    label: str  # the engine (and version), unique among the report's runs
    status: str
    summaries: tuple[LevelSummary, ...]
    kind: str  # the load kind the cost model used: "concurrency", "rate" or "trace"
    missing: tuple[str, ...] = ()  # planned levels never measured
    cut_short: tuple[str, ...] = ()  # levels measured but not finished
    notes: tuple[str, ...] = ()
    server_views: tuple[ServerView, ...] = ()
    launched_by: str = "user"  # "bench" when the toolkit started the engine
    gpu_names: tuple[str, ...] | None = None  # the GPUs that ran it; None when the run does not say
    provenance: RunProvenance = RunProvenance()  # what ran, from run.json
    repeated: tuple[RepeatedLevel, ...] = ()  # levels measured more than once, with their intervals
    capacity: JsonObject | None = None  # capacity.json of a capacity search, as written: its answer and its trail
    dataset: DatasetInfo | None = None  # the traffic replayed, when it came from a file
    workload: str | None = None  # otherwise the synthetic workload's lengths, in words
    adapter_counts: tuple[AdapterCount, ...] = ()  # a sweep across adapter counts, against the base model alone
    keep_text: bool = False  # requests.jsonl holds the prompts and answers (--keep-text)
    bills: tuple[LevelBill, ...] = ()  # each level's usage at the compared provider's prices
    gpu_views: tuple[GpuView, ...] = ()  # each level as its GPUs saw it (power, utilization), when read
    gpu_reading: GpuReading | None = None  # how the GPUs were read, or why not; None: run.json does not say
    replica_views: tuple[tuple[int, ServerView], ...] = ()  # behind a router: each replica's own view per level
    router_policy: str | None = None
    replica_budgets: tuple[str, ...] = ()  # each replica's share of the machine, in words (engines.budget)
    ui: ThroughUi | None = None  # measured through a UI in front (run.json's engine.details.ui)
    ui_screenshot: bytes | None = None  # the UI's page answering, as a browser saw it (PNG)
    ui_levels: tuple[UiLevel, ...] = ()  # the same levels direct to the engine, when that run is in the report
    plan: RunPlan | NoPlan | None = None  # the memory plan beside the measurements; None: an endpoint the user ran
    rules_line: str | None = None  # held to a benchmark's rules: where it departs from them, or that it keeps them
    session_lane: SessionLane | None = None  # agent sessions: one session drawn call by call


@dataclass(frozen=True)
class ReportInput:
    decision: Decision
    runs: tuple[ReportRun, ...]
    cost_curve: CostCurve | None
    settings: JsonObject  # the scenario's slo, traffic, pricing and requirements, as used
    price_origins: tuple[str, ...]
    generated_at: datetime
    skipped: tuple[str, ...] = ()  # run directories left out, and why
    cache_hit_source: str = "assumed"  # where the cost model's prompt-cache hit rate came from, in words
    tasks: TaskDecision | None = None  # agent sessions: the decision in tasks
    finetunes: FinetuneDecision | None = None  # runs across LoRA adapters: N fine-tunes priced three ways
