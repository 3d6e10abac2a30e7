"""run.json as a typed record: `RunInfo` and a sub-record for each part (engine, endpoint, host, client,
telemetry, plan, seeds, tool), read and written with the keys the file has always had.

run.json is the contract between a sweep and everything that reads it later, so its keys do not change: each
sub-record's `to_json` writes what its `from_json` reads. A run.json of an older version may lack a part, or
hold one this version cannot read: that part is None and `RunInfo.unread` names it, so a report can say
what it leaves out. An engine's own details that the toolkit only shows (an image digest, a command line)
stay as written in `EngineDetails.other`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from pydantic import ValidationError

from bench.inputs.scenario import Scenario
from bench.run.capacity_record import CapacityPlan
from engines.engine_file import EngineFile
from loadgen.types import SLO, DatasetInfo

Record = TypeVar("Record")
Part = TypeVar("Part")


def _known(cls: type[Record], raw: dict[str, Any]) -> Record:
    """A dataclass from the keys of `raw` it has (others, from another version, are not its business)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{key: value for key, value in raw.items() if key in names})


@dataclass(frozen=True)
class ToolRecord:
    name: str = "llm-selfhost-bench"
    version: str = "unknown"


@dataclass(frozen=True)
class RouterRecord:
    """vllm-router in front of replicas."""

    policy: str | None = None
    pid: int | None = None
    time_to_ready_s: float | None = None
    command: list[str] = field(default_factory=list)
    args: dict[str, str] = field(default_factory=dict)  # its own flags given with --router-arg


@dataclass(frozen=True)
class ReplicaRecord:
    """One replica behind a router (or a pod behind an endpoint's gateway): where it answers and its metrics."""

    base_url: str | None = None
    metrics_url: str | None = None
    name: str | None = None
    model: str | None = None
    version: str | None = None
    launched_by: str | None = None
    details: dict[str, object] = field(default_factory=dict)  # the replica engine's own, as written
    budget_text: str | None = None  # its share of the machine (engines.budget), in words
    budget: dict[str, object] | None = None  # the same as figures: cpus, threads, gpus, env


@dataclass(frozen=True)
class UiPage:
    """What a browser saw of the UI's page (engines.openwebui_page.PageCheck as written)."""

    screenshot: str | None = None
    answer: str | None = None
    seconds: float | None = None
    why_not: str | None = None


@dataclass(frozen=True)
class UiRecord:
    """A chat UI in front of the engine: the load went through its chat API."""

    name: str = "Open WebUI"
    version: str | None = None
    base_url: str | None = None
    time_to_ready_s: float | None = None
    pid: int | None = None
    page: UiPage | None = None

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> UiRecord:
        page = raw.get("page")
        return _known(cls, {**raw, "page": _known(UiPage, page) if isinstance(page, dict) else None})


# The details the toolkit itself reads; every other key an engine wrote is kept in `other`, as written.
_READ_DETAILS = ("model_argument", "time_to_ready_s", "pid", "router", "replicas", "ui")


@dataclass(frozen=True)
class EngineDetails:
    model_argument: str | None = None  # the model as it was asked for (a file, a preset, `default`)
    time_to_ready_s: float | None = None
    pid: int | None = None  # its main process on this machine, when it runs here
    router: RouterRecord | None = None
    replicas: list[ReplicaRecord] = field(default_factory=list)
    ui: UiRecord | None = None
    other: dict[str, object] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> EngineDetails:
        router, ui = raw.get("router"), raw.get("ui")
        return cls(model_argument=raw.get("model_argument"), time_to_ready_s=raw.get("time_to_ready_s"),
                   pid=raw.get("pid"), router=_known(RouterRecord, router) if isinstance(router, dict) else None,
                   replicas=[_known(ReplicaRecord, r) for r in raw.get("replicas") or [] if isinstance(r, dict)],
                   ui=UiRecord.from_json(ui) if isinstance(ui, dict) else None,
                   other={key: value for key, value in raw.items() if key not in _READ_DETAILS})

    def to_json(self) -> dict[str, Any]:
        read: dict[str, Any] = {"model_argument": self.model_argument, "time_to_ready_s": self.time_to_ready_s,
                                "pid": self.pid, "router": asdict(self.router) if self.router else None,
                                "replicas": [asdict(r) for r in self.replicas],
                                "ui": asdict(self.ui) if self.ui else None}
        return {**self.other, **{key: value for key, value in read.items() if value not in (None, [])}}


@dataclass(frozen=True)
class EngineRecord:
    """What ran (engines.types.EngineInfo as written)."""

    name: str = "engine"
    model: str | None = None
    version: str | None = None
    launched_by: str = "user"  # "bench" for an engine the toolkit started
    details: EngineDetails = field(default_factory=EngineDetails)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> EngineRecord:
        return cls(name=str(raw.get("name") or "engine"), model=raw.get("model"), version=raw.get("version"),
                   launched_by=str(raw.get("launched_by") or "user"),
                   details=EngineDetails.from_json(raw.get("details") or {}))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "version": self.version, "launched_by": self.launched_by,
                "details": self.details.to_json()}

    @property
    def label(self) -> str:
        """`vllm 0.8.5`: the engine and its version where it is known; through a UI, each its own version
        (`reference 0.1.0 via Open WebUI 0.12.4`)."""
        ui = self.details.ui
        if ui is not None and ui.name and self.name.endswith(f" via {ui.name}"):
            engine = self.name.removesuffix(f" via {ui.name}")
            return " ".join(part for part in (engine, self.version, "via", ui.name, ui.version) if part)
        return f"{self.name} {self.version}" if self.version else self.name


@dataclass(frozen=True)
class EndpointRecord:
    base_url: str
    model: str
    api_key_env: str | None = None  # the variable's name; the key itself is never written


@dataclass(frozen=True)
class GpuRecord:
    index: int | None = None
    name: str = ""
    memory_gib: float | None = None
    driver: str | None = None


@dataclass(frozen=True)
class HostRecord:
    """The machine that ran the sweep (bench.inputs.hardware.describe_host)."""

    hostname: str | None = None
    os: str | None = None
    python: str | None = None
    cpu_model: str | None = None
    cpu_cores: int | None = None
    cpus_usable: int | None = None
    memory_gib: float | None = None
    gpus: list[GpuRecord] | None = None  # [] for none; None when the run does not say

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> HostRecord:
        gpus = raw.get("gpus")
        return _known(cls, {**raw, "gpus": None if gpus is None else [_known(GpuRecord, g) for g in gpus]})

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def kind(self) -> str:
        """The hardware as one line that two runs on like machines share (no host name): the CPU, the CPUs usable,
        the GPUs and their driver."""
        parts = [f"{self.cpu_model or 'unknown CPU'} x{self.cpus_usable or self.cpu_cores or '?'}"]
        gpus = Counter(f"{gpu.name} (driver {gpu.driver or '?'})" for gpu in self.gpus or [])
        parts += [f"{count}x {name}" for name, count in sorted(gpus.items())]
        return ", ".join(parts)


@dataclass(frozen=True)
class ResumedElsewhere:
    """A resume on hardware unlike the run's before it: the levels measured before, and the machine after."""

    resumed_at: str
    levels_before: list[str]
    hardware: HostRecord

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ResumedElsewhere:
        return cls(str(raw["resumed_at"]), [str(label) for label in raw["levels_before"]],
                   HostRecord.from_json(raw["hardware"]))

    def to_json(self) -> dict[str, Any]:
        return {"resumed_at": self.resumed_at, "levels_before": self.levels_before,
                "hardware": self.hardware.to_json()}


@dataclass(frozen=True)
class ClientRecord:
    """How the load generator talked to the endpoint, and from how many processes."""

    strict_openai: bool = False
    tokenizer: str | None = None  # the tokenizer.json prompts were cut with
    on_throttle: str | None = None
    workers: int = 1
    ray: str | None = None  # the Ray cluster the workers ran on


@dataclass(frozen=True)
class GpuTelemetry:
    sampled: bool = False
    reader: str | None = None  # NVML or nvidia-smi
    why_not: str | None = None


@dataclass(frozen=True)
class TelemetryRecord:
    """What was sampled while the levels ran: the server's /metrics and the GPUs, and why not."""

    metrics_url: str | None = None
    sampled: bool = False
    why_not: str | None = None
    gpu: GpuTelemetry = field(default_factory=GpuTelemetry)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TelemetryRecord:
        return _known(cls, {**raw, "gpu": _known(GpuTelemetry, raw.get("gpu") or {})})

    def to_json(self) -> dict[str, Any]:
        gpu = {key: value for key, value in asdict(self.gpu).items() if value is not None}
        return {"metrics_url": self.metrics_url, "sampled": self.sampled, "why_not": self.why_not, "gpu": gpu}


@dataclass(frozen=True)
class PlanRecord:
    """What the run set out to do: a sweep of levels, or a capacity search (with its settings)."""

    kind: str = "sweep"  # "sweep" or "capacity"
    repeats: int = 1
    capacity: CapacityPlan | None = None

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> PlanRecord:
        kind = str(raw.get("kind") or "sweep")
        return cls(kind, int(raw.get("repeats") or 1), CapacityPlan.from_json(raw) if kind == "capacity" else None)

    def to_json(self) -> dict[str, Any]:
        capacity = self.capacity.to_json() if self.capacity is not None else {}
        return {"kind": self.kind, "repeats": self.repeats, **capacity}


@dataclass(frozen=True)
class Seeds:
    requests: int = 0
    warmup: int = 0


@dataclass(frozen=True)
class ImportedFile:
    name: str  # as kept in the run directory's imported/ folder
    sha256: str
    source: str  # where it was read from


@dataclass(frozen=True)
class ImportRecord:
    """A run made by another tool, read from its saved results (`bench import`): which tool, its version where
    the files say it, and each file with its sha256."""

    tool: str  # vllm, guidellm, aiperf
    version: str | None = None
    files: list[ImportedFile] = field(default_factory=list)
    engine: str | None = None  # the engine's name as given to `bench import --engine`, over what the files say

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ImportRecord:
        return cls(tool=str(raw["tool"]), version=raw.get("version"),
                   files=[_known(ImportedFile, f) for f in raw.get("files") or []], engine=raw.get("engine"))

    @property
    def source(self) -> str:
        """`imported from guidellm 0.8.1`: the tool, and its version where the files said it."""
        return f"imported from {self.tool}" + (f" {self.version}" if self.version else "")


@dataclass
class RunInfo:
    """run.json. `scenario` is the resolved scenario the run measured; `levels` the labels planned, in order
    (a capacity search adds its probes as it goes); `engine_spec` how the engine was launched (for --resume).
    A part an older run.json lacks, or that does not read with this version, is None and named in `unread`."""

    run_id: str
    status: str = "unknown"  # starting, running, complete, interrupted, failed: ...
    started_at: str | None = None
    finished_at: str | None = None
    tool: ToolRecord | None = None
    engine: EngineRecord = field(default_factory=EngineRecord)
    endpoint: EndpointRecord | None = None
    hardware: HostRecord | None = None
    scenario: Scenario | None = None
    levels: list[str] = field(default_factory=list)
    client: ClientRecord = field(default_factory=ClientRecord)
    seeds: Seeds | None = None
    telemetry: TelemetryRecord | None = None
    plan: PlanRecord = field(default_factory=PlanRecord)
    engine_spec: EngineFile | None = None
    resumed_at: list[str] = field(default_factory=list)
    resumed_elsewhere: list[ResumedElsewhere] = field(default_factory=list)  # resumes on other hardware, in order
    dataset: DatasetInfo | None = None  # a replayed file: its sha256, counts and lengths, never its text
    imported: ImportRecord | None = None  # made by another tool and imported (`bench import`)
    unread: list[str] = field(default_factory=list)  # parts run.json lacked or this version could not read

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RunInfo:
        unread: list[str] = []

        def part(key: str, read: Callable[[Any], Part]) -> Part | None:
            value = raw.get(key)
            if value is None:
                unread.append(key)
                return None
            try:
                return read(value)
            except (ValidationError, TypeError, ValueError, KeyError):
                unread.append(key)
                return None

        info = cls(
            run_id=str(raw.get("run_id") or ""), status=str(raw.get("status") or "unknown"),
            started_at=raw.get("started_at"), finished_at=raw.get("finished_at"),
            tool=part("tool", lambda v: _known(ToolRecord, v)),
            engine=part("engine", EngineRecord.from_json) or EngineRecord(),
            endpoint=part("endpoint", lambda v: _known(EndpointRecord, v)),
            hardware=part("hardware", HostRecord.from_json), scenario=part("scenario", Scenario.model_validate),
            levels=list(raw.get("levels") or []),
            client=part("client", lambda v: _known(ClientRecord, {**v, "workers": v.get("workers") or 1}))
            or ClientRecord(),
            seeds=part("seeds", lambda v: _known(Seeds, v)), telemetry=part("telemetry", TelemetryRecord.from_json),
            plan=part("plan", PlanRecord.from_json) or PlanRecord(),
            engine_spec=part("engine_spec", lambda v: EngineFile.model_validate(v) if v else None),
            resumed_at=list(raw.get("resumed_at") or []),
            resumed_elsewhere=part("resumed_elsewhere", lambda v: [ResumedElsewhere.from_json(m) for m in v]) or [],
            dataset=part("dataset", DatasetInfo.from_json),
            imported=part("imported", ImportRecord.from_json),
        )
        # An endpoint, telemetry, a dataset and an import are absent for good reasons (not launched yet, none given);
        # an imported run never had the parts a sweep records.
        absent = {"endpoint", "telemetry", "dataset", "imported", "resumed_elsewhere"} | (
            {"hardware", "scenario", "seeds", "engine_spec"} if info.imported else set())
        info.unread = [key for key in unread if key not in absent]
        return info

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "status": self.status, "started_at": self.started_at,
            "finished_at": self.finished_at, "tool": asdict(self.tool) if self.tool else None,
            "engine": self.engine.to_json(), "endpoint": asdict(self.endpoint) if self.endpoint else None,
            "hardware": self.hardware.to_json() if self.hardware else None,
            "scenario": self.scenario.model_dump(mode="json") if self.scenario else None, "levels": self.levels,
            "client": asdict(self.client), "seeds": asdict(self.seeds) if self.seeds else None,
            "telemetry": self.telemetry.to_json() if self.telemetry else None, "plan": self.plan.to_json(),
            "engine_spec": self.engine_spec.model_dump(mode="json") if self.engine_spec else None,
            "resumed_at": self.resumed_at,
            **({"resumed_elsewhere": [m.to_json() for m in self.resumed_elsewhere]} if self.resumed_elsewhere else {}),
            "dataset": asdict(self.dataset) if self.dataset else None,
            **({"imported": asdict(self.imported)} if self.imported else {}),
        }

    def source(self, with_files: bool = False) -> str:
        """Where the run's figures come from: measured here, or imported from which tool (and files)."""
        if self.imported is None:
            return "measured here"
        if not with_files:
            return self.imported.source
        return self.imported.source + ": " + ", ".join(f"{f.source} (sha256 {f.sha256[:12]})"
                                                       for f in self.imported.files)

    @property
    def latest_hardware(self) -> HostRecord | None:
        """The machine that measured the run's latest levels: the last it was resumed on elsewhere, else its own."""
        return self.resumed_elsewhere[-1].hardware if self.resumed_elsewhere else self.hardware

    @property
    def gpu_names(self) -> list[str] | None:
        """The GPUs of the machine that ran it ([] for none); None when the run does not say."""
        if self.hardware is None or self.hardware.gpus is None:
            return None
        return [gpu.name for gpu in self.hardware.gpus]

    @property
    def slo(self) -> SLO:
        return self.scenario.slo if self.scenario is not None else SLO()
