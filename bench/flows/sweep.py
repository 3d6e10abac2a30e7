"""A run: one engine, one scenario, level after level, into one run directory.

    engine launcher -> Endpoint -> for each level the driver asks for: warm-up, measured requests ->
    records on disk -> summary after every level (so an interrupted run keeps its summary too)

Which levels run is the driver's business: `FixedLevels` for a sweep (the planned levels, `repeats` times,
in rounds, so drift shows as spread) or `bench.flows.capacity.CapacityDriver` for a capacity search (each next
load chosen from the probes before it). A resumed run (`bench.run.resume`) starts from what its directory holds.

All requests of a run come from one seeded stream, so no prompt is sent twice (a prefix cache can't
flatter a later level) and two engines swept with the same scenario get the same prompts in order. A
replayed dataset (`loadgen.replay`) is that stream, from its start again when a sweep outlasts it; a trace
replayed at its own times is a level of its own (`t1`), and each such level sends the whole trace.
Between levels a launched engine is asked whether it still answers, so one that died ends its run with
that said, instead of a trail of failed levels.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from bench.flows.capacity import CapacityDriver, CapacityPlan
from bench.inputs.hardware import describe_host
from bench.inputs.scenario import LoadSettings, Scenario
from bench.run import rundir
from bench.run.resume import Resume, skip_sent
from bench.run.rundir import Run
from bench.run.runinfo import (
    ClientRecord,
    EndpointRecord,
    EngineRecord,
    GpuTelemetry,
    HostRecord,
    PlanRecord,
    ResumedElsewhere,
    RunInfo,
    Seeds,
    TelemetryRecord,
    ToolRecord,
)
from bench.run.tally import RunTally, TallyingWriter
from engines.endpoint import EndpointError, context_length, list_models, read_api_key
from engines.engine_file import EngineFile
from engines.launch import EngineGone, still_answering
from engines.replicas import replica_metrics_urls
from engines.types import Endpoint, EngineInfo, Launcher
from loadgen import machine, telemetry
from loadgen.adapters import AdapterPlan, with_adapters
from loadgen.arrivals import Level
from loadgen.client import ClientOptions
from loadgen.datasets import PromptTokenizer, iter_requests
from loadgen.gpu import find_reader
from loadgen.pool import ClientPool, run_split_level
from loadgen.recorder import JsonlWriter
from loadgen.replay.requests import Replay, check_context, describe, replay_requests
from loadgen.runner import LevelBounds, LevelContext, run_level_blocking
from loadgen.sessions.model import SessionSet
from loadgen.sessions.runner import SessionLevel
from loadgen.sessions.stream import SessionStream, describe_sessions
from loadgen.structured import Structure, with_structure
from loadgen.types import LevelSummary, RequestRecord, RequestSpec

TOOL_NAME = "llm-selfhost-bench"
WARMUP_SEED_OFFSET = 1_000_003
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")

class SweepProgress(Protocol):
    def level_started(self, level: Level, bounds: LevelBounds) -> None: ...
    def request_finished(self, record: RequestRecord) -> None: ...
    def level_finished(self, summary: LevelSummary | None) -> None: ...


class LevelDriver(Protocol):
    def next_level(self) -> Level | None:
        """The level to run next; None when the run is done."""

    def level_finished(self, level: Level, summary: LevelSummary | None) -> None:
        """A level ended (its summary None when nothing was measured)."""


@dataclass(frozen=True)
class SweepPlan:
    scenario: Scenario
    runs_root: Path
    engine_kind: str = "endpoint"
    strict_openai: bool = False
    tokenizer: PromptTokenizer | None = None
    tokenizer_path: str | None = None
    repeats: int = 1
    capacity: CapacityPlan | None = None  # a capacity search instead of the scenario's levels
    engine_spec: dict[str, Any] = field(default_factory=dict)  # the EngineFile, kept in run.json for --resume
    replay: Replay | None = None  # the scenario's dataset, read and prepared
    sessions: SessionSet | None = None  # agent sessions: a session dataset read, or the synthetic ones drawn
    clients: ClientPool = ClientPool()  # one client process, or a level split across several (--workers, --ray)
    adapters: AdapterPlan | None = None  # traffic across LoRA adapters: their folders, the mix, the counts
    structure: Structure | None = None  # the shape every answer is asked in (a dataset line may ask its own)

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"--repeats {self.repeats}: expected a whole number >= 1")
        if self.capacity is not None and self.adapters is not None and self.adapters.counts is not None:
            raise ValueError("--adapter-counts is a sweep's dimension: a capacity search runs one mix (give "
                             "--adapters with the adapters to search with)")
        if self.sessions is not None and self.clients.is_split:
            raise ValueError("agent sessions run in one client process for now: drop --workers / --ray")

    def on_throttle(self) -> Literal["fail", "retry"]:
        """The scenario's choice, else: a capacity search fails a throttled request (the limit is a ceiling
        on capacity), a sweep of an endpoint retries it (as a provider's client would)."""
        if self.scenario.load.on_throttle is not None:
            return self.scenario.load.on_throttle
        is_endpoint = self.engine_spec.get("engine", self.engine_kind) == "endpoint"
        return "retry" if self.capacity is None and is_endpoint else "fail"

    def levels(self) -> list[Level]:
        """The levels planned up front: none for a capacity search, whose probes are chosen as it goes."""
        if self.capacity is not None:
            return []
        levels = plan_levels(self.scenario.load, self.repeats, self.trace_scale)
        counts = self.adapters.counts if self.adapters is not None else None
        if counts is None:
            return levels
        # each load across every adapter count in turn (the base model alone first): counts side by side
        return [replace(level, adapters=count) for level in levels for count in counts]

    def level_requests(self, level: Level, specs: Iterator[RequestSpec]) -> Iterator[RequestSpec]:
        """A level's requests, each asking for its adapter of the level's mix, and in the workload's shape."""
        if self.structure is not None:
            specs = with_structure(specs, self.structure)
        if self.adapters is None:
            return specs
        return with_adapters(specs, self.adapters.mix_for(level.adapters))

    @property
    def trace_scale(self) -> float | None:
        """A trace's time scale, when the dataset is one (it can then be replayed as a level of its own)."""
        return self.replay.settings.time_scale if self.replay is not None and self.replay.dataset.is_trace else None

    def bounds(self, level: Level | None = None) -> LevelBounds:
        """When a level ends; a trace's when it has been sent whole (or after --requests)."""
        load = self.scenario.load
        if level is not None and level.kind == "trace" and self.replay is not None:
            return LevelBounds(duration_s=max(self.replay.span_s * level.value, 1e-3), max_requests=load.requests,
                               num_warmup=load.warmup_requests)
        return LevelBounds(duration_s=load.duration_s, max_requests=load.requests, num_warmup=load.warmup_requests,
                           max_sessions=load.sessions if self.sessions is not None else None)

    def session_stream(self, max_model_len: int | None, resume: Resume | None) -> SessionStream | None:
        """The run's agent sessions, past those a resumed run already started."""
        if self.sessions is None:
            return None
        stream = SessionStream(self.sessions, self.scenario.workload.seed, self.tokenizer,
                               self.scenario.load.max_think_s, max_model_len)
        if resume is not None:
            stream.skip(resume.num_sessions_started)
            stream.num_requests = (resume.last_request_id or -1) + 1
        return stream

    def requests(self, cycle: bool = True) -> Iterator[RequestSpec]:
        """The run's request stream: the dataset's requests, or the synthetic workload's."""
        workload = self.scenario.workload
        if self.replay is None:
            return iter_requests(workload, self.tokenizer)
        return replay_requests(self.replay, workload.api, self.tokenizer, workload.seed, cycle)


@dataclass
class SweepResult:
    run_dir: Path
    run: Run | None  # the run directory as read when the sweep ended (None: it never started, and is gone)
    status: str

    @property
    def summaries(self) -> list[LevelSummary]:
        return list(self.run.summaries) if self.run is not None else []


def plan_levels(load: LoadSettings, repeats: int = 1, trace_scale: float | None = None) -> list[Level]:
    """Every level once, then every level again: `repeats` rounds. A trace with no level given is
    replayed at its own times (scaled), once a round."""
    if not load.concurrency and not load.rates and trace_scale is not None:
        return [Level("trace", trace_scale, max_concurrency=load.max_concurrency, repeat=repeat)
                for repeat in range(1, repeats + 1)]
    if not load.concurrency and not load.rates:
        raise ValueError("no levels to run: give --concurrency and/or --rate")
    return [level for repeat in range(1, repeats + 1) for level in (
        *[Level("concurrency", c, repeat=repeat) for c in load.concurrency],
        *[Level("rate", r, load.burstiness, load.max_concurrency, repeat=repeat) for r in load.rates])]


@dataclass
class FixedLevels:
    """A sweep's levels, in order, less those a resumed run already holds."""

    todo: list[Level]

    def next_level(self) -> Level | None:
        return self.todo.pop(0) if self.todo else None

    def level_finished(self, level: Level, summary: LevelSummary | None) -> None:
        pass


def make_driver(plan: SweepPlan, run_dir: Path, resume: Resume | None) -> LevelDriver:
    if plan.capacity is None:
        done = resume.done_labels if resume else set()
        return FixedLevels([level for level in plan.levels() if level.label not in done])
    driver = CapacityDriver(plan.capacity, run_dir)
    if resume is not None:
        driver.replay(resume.finished)
    return driver


def run_sweep(plan: SweepPlan, launch: Launcher, progress: SweepProgress | None = None,
              resume: Resume | None = None) -> SweepResult:
    """Launch (or attach to) the engine, run every level the driver asks for, and always leave a consistent
    run directory.

    The run directory exists before the engine starts, so a launched engine logs into it; if the engine
    never started and left no log, the empty directory is removed again (not a resumed one)."""
    plan.bounds()  # validate before anything starts
    if resume is None:
        run_dir = rundir.new_run_dir(plan.runs_root, plan.engine_kind, plan.scenario.name)
        run = _run_info(plan, run_dir)
    else:
        run_dir = resume.run_dir
        resumed_at = _now()
        elsewhere = [ResumedElsewhere(resumed_at, [label for label, _ in resume.finished], resume.hardware)] \
            if resume.hardware is not None else []
        run = replace(resume.run, status="starting", finished_at=None, resumed_at=[*resume.run.resumed_at, resumed_at],
                      resumed_elsewhere=[*resume.run.resumed_elsewhere, *elsewhere])
    rundir.write_run_info(run_dir, run)
    # Each level summarized from its records as they are written: requests.jsonl is not read back as the run goes.
    tally = RunTally(run.slo, [s for _, s in resume.finished if s is not None] if resume else ())
    status, started = "interrupted", False
    try:
        with launch(run_dir) as (endpoint, engine):
            started = True
            url = endpoint.metrics_url or telemetry.metrics_url(endpoint.base_url)
            no_telemetry = telemetry.probe(url)
            gpus = _gpu_telemetry(engine)
            run = replace(run, status="running", engine=EngineRecord.from_json(asdict(engine)),
                          endpoint=EndpointRecord(endpoint.base_url, endpoint.model, endpoint.api_key_env),
                          telemetry=TelemetryRecord(url, no_telemetry is None, no_telemetry, gpus))
            rundir.write_run_info(run_dir, run)
            _check_context(plan, endpoint)
            _check_adapters(plan, endpoint)
            with telemetry.sampling(url if no_telemetry is None else None, run_dir / rundir.TELEMETRY_FILE,
                                    gpu=gpus.sampled), _replica_sampling(engine, run_dir):
                _run_levels(plan, endpoint, engine, run_dir, run, tally, progress, resume)
        status = "complete"
    except Exception as exc:
        status = f"failed: {type(exc).__name__}: {exc}"
        raise
    finally:
        measured = None
        if not started and resume is None and not (run_dir / rundir.ENGINE_LOG).exists():
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            rundir.write_run_info(run_dir, replace(run, status=status, finished_at=_now()))
            rundir.write_summaries(run_dir, tally.all_summaries())
            measured = rundir.read_run(run_dir)  # the run's one read: its report and its history are made from it
            if status == "complete" and measured.summaries:
                remember_run(measured, plan.runs_root)
    return SweepResult(run_dir, measured, status)


def remember_run(run: Run, runs_root: Path) -> None:
    """The finished run's levels into the runs folder's history (`bench history`); a history that can't be
    written costs the run nothing."""
    import logging
    import sqlite3

    from bench.run.history import record_run

    try:
        record_run(run, runs_root)
    except (sqlite3.Error, OSError) as exc:
        logging.getLogger(__name__).warning("the run was not added to %s's history: %s", runs_root, exc)


def _run_levels(
    plan: SweepPlan, endpoint: Endpoint, engine: EngineInfo, run_dir: Path, run: RunInfo, tally: RunTally,
    progress: SweepProgress | None, resume: Resume | None,
) -> None:
    """Every level the driver asks for; a label not planned up front (a capacity probe) is added to `run`."""
    load = plan.scenario.load
    options = ClientOptions(
        base_url=endpoint.base_url.rstrip("/"), model=endpoint.model, api_key=read_api_key(endpoint.api_key_env),
        request_timeout_s=load.request_timeout_s, temperature=plan.scenario.workload.temperature,
        strict_openai=plan.strict_openai, ignore_eos=plan.scenario.workload.ignore_eos,
        on_throttle=plan.on_throttle(), logprobs=plan.scenario.workload.logprobs,
    )
    workload = plan.scenario.workload
    specs = skip_sent(plan.requests(), resume and resume.last_request_id)
    # Warm-up requests are synthetic, from a seed of their own: a dataset's prompts are all kept for measuring.
    warmup_workload = workload.model_copy(update={"seed": workload.seed + WARMUP_SEED_OFFSET, "dataset": None})
    warmup_specs = skip_sent(iter_requests(warmup_workload, plan.tokenizer), resume and resume.last_warmup_id)
    driver = make_driver(plan, run_dir, resume)
    sessions = plan.session_stream(context_length(endpoint) if plan.sessions is not None else None, resume)
    clients = replace(plan.clients, log_path=run_dir / rundir.WORKERS_LOG)
    own_processes = _own_processes(endpoint, engine)
    first = True
    with TallyingWriter(run_dir / rundir.REQUESTS_FILE, tally) as records, \
            JsonlWriter(run_dir / rundir.LEVELS_FILE) as levels, clients.session():
        while (level := driver.next_level()) is not None:
            if not first and engine.launched_by == "bench" and not still_answering(endpoint.base_url):
                raise EngineGone(f"{engine.name} stopped answering at {endpoint.base_url} before {level.label}; "
                                 f"see {run_dir / rundir.ENGINE_LOG}")
            first = False
            if level.label not in run.levels:  # a capacity search plans its probes as it goes
                run.levels.append(level.label)
                rundir.write_run_info(run_dir, run)
            bounds = plan.bounds(level)
            if progress:
                progress.level_started(level, bounds)
            ctx = LevelContext(run_dir.name, engine.name, level, options, records,
                               on_record=progress.request_finished if progress else None, keep_text=workload.keep_text,
                               read_answers=workload.fingerprint_answers)
            level_specs = plan.level_requests(level, plan.requests(cycle=False) if level.kind == "trace" else specs)
            level_warmup = plan.level_requests(level, warmup_specs)
            before = machine.snapshot()
            if clients.is_split:
                split = run_split_level(ctx, bounds, level_specs, level_warmup, clients)
                level_run = split.level_run
                if level.kind != "trace":  # requests a worker was fed but never sent are the next level's first
                    specs = itertools.chain(split.unsent, specs)
            else:
                level_run = run_level_blocking(ctx, bounds, SessionLevel(sessions) if sessions else level_specs,
                                               level_warmup)
            after = machine.snapshot()
            if before and after:
                level_run = replace(level_run, machine=machine.load_between(before, after, own_processes,
                                                                          level_run.workers))
            row = asdict(level_run)
            levels.write(row)
            summary = tally.level_finished(row)
            rundir.write_summaries(run_dir, tally.summaries)
            driver.level_finished(level, summary)
            if progress:
                progress.level_finished(summary)


def _own_processes(endpoint: Endpoint, engine: EngineInfo) -> list[int]:
    """The run's own processes, told apart from other work on the machine: this command (with its children: a
    local engine, client workers, the telemetry sampler), a container engine, an endpoint's server here."""
    roots = [os.getpid()]
    if isinstance(engine.details.get("pid"), int):
        roots.append(engine.details["pid"])
    url = urlsplit(endpoint.base_url)
    if url.hostname in LOCAL_HOSTS and url.port and (listener := machine.listening_pid(url.port)):
        roots.append(listener)
    return roots


@contextmanager
def _replica_sampling(engine: EngineInfo, run_dir: Path) -> Iterator[None]:
    """Behind a router, each replica's own /metrics too (one sampler each), so the report can show how the
    router spread the load and where the prefix cache hit."""
    with ExitStack() as stack:
        for index, url in enumerate(replica_metrics_urls(engine)):
            path = run_dir / rundir.REPLICA_TELEMETRY.format(index=index)
            stack.enter_context(telemetry.sampling(url, path))
        yield


def _gpu_telemetry(engine: EngineInfo) -> GpuTelemetry:
    """Whether the GPUs are read while the levels run: only for an engine started here (an endpoint's
    GPUs, if any, are on another machine), and only where NVML or nvidia-smi answers."""
    if engine.launched_by != "bench":
        return GpuTelemetry(why_not="the endpoint was already running: its GPUs are not read from here")
    reader, how = find_reader()
    return GpuTelemetry(sampled=True, reader=how) if reader else GpuTelemetry(why_not=how)


def _check_context(plan: SweepPlan, endpoint: Endpoint) -> None:
    """A dataset with requests longer than the model's context is refused before any is sent."""
    if plan.replay is not None and (limit := context_length(endpoint)) is not None:
        check_context(plan.replay, limit)


def _check_adapters(plan: SweepPlan, endpoint: Endpoint) -> None:
    """Every adapter the traffic asks for is listed at /v1/models, or nothing is sent."""
    if plan.adapters is None:
        return
    listed = set(list_models(endpoint)[0])
    missing = [name for name in plan.adapters.mix.names if name not in listed]
    if missing:
        raise EndpointError(f"{endpoint.base_url}/models does not list the adapter{'s' * (len(missing) > 1)} "
                            f"{', '.join(missing)} the traffic asks for (it lists {', '.join(sorted(listed)[:10])}); "
                            "serve them (--lora NAME=PATH or --adapters-dir for an engine bench starts)")


def _run_info(plan: SweepPlan, run_dir: Path) -> RunInfo:
    seed = plan.scenario.workload.seed
    return RunInfo(
        run_id=run_dir.name, status="starting", started_at=_now(), tool=ToolRecord(TOOL_NAME, tool_version()),
        engine=EngineRecord(name=plan.engine_kind), hardware=HostRecord.from_json(describe_host()),
        scenario=plan.scenario, levels=[level.label for level in plan.levels()],
        client=ClientRecord(strict_openai=plan.strict_openai, tokenizer=plan.tokenizer_path,
                            on_throttle=plan.on_throttle(), workers=plan.clients.workers,
                            ray=plan.clients.ray_address),
        seeds=Seeds(requests=seed, warmup=seed + WARMUP_SEED_OFFSET),
        plan=PlanRecord("capacity" if plan.capacity else "sweep", plan.repeats, plan.capacity),
        engine_spec=EngineFile.model_validate(plan.engine_spec) if plan.engine_spec else None,
        dataset=describe(plan.replay) if plan.replay is not None else
        describe_sessions(plan.sessions) if plan.sessions is not None else None,
    )


def tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(TOOL_NAME)
    except PackageNotFoundError:
        return "unknown"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
