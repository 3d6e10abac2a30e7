"""A sweep: one engine, one scenario, every level in turn, into one run directory.

    engine launcher -> Endpoint -> for each level: warm-up, measured requests -> records on disk
                    -> summary after every level (so an interrupted sweep keeps its summary too)

All requests of a sweep come from one seeded stream, so no prompt is sent twice (a prefix cache can't
flatter a later level) and two engines swept with the same scenario get the same prompts in order.
"""

from __future__ import annotations

import shutil
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from bench import rundir
from bench.hardware import describe_host
from bench.rundir import RunInfo
from bench.scenario import LoadSettings, Scenario
from engines.endpoint import read_api_key
from engines.types import Endpoint, EngineInfo, Launcher
from loadgen import telemetry
from loadgen.arrivals import Level
from loadgen.client import ClientOptions
from loadgen.datasets import PromptTokenizer, iter_requests
from loadgen.recorder import JsonlWriter
from loadgen.runner import LevelBounds, LevelContext, LevelRun, run_level_blocking
from loadgen.types import LevelSummary, RequestRecord

TOOL_NAME = "llm-selfhost-bench"
WARMUP_SEED_OFFSET = 1_000_003

class SweepProgress(Protocol):
    def level_started(self, level: Level, bounds: LevelBounds) -> None: ...
    def request_finished(self, record: RequestRecord) -> None: ...
    def level_finished(self, summary: LevelSummary | None) -> None: ...


@dataclass(frozen=True)
class SweepPlan:
    scenario: Scenario
    runs_root: Path
    engine_kind: str = "endpoint"
    strict_openai: bool = False
    tokenizer: PromptTokenizer | None = None

    def levels(self) -> list[Level]:
        return plan_levels(self.scenario.load)

    def bounds(self) -> LevelBounds:
        load = self.scenario.load
        return LevelBounds(duration_s=load.duration_s, max_requests=load.requests, num_warmup=load.warmup_requests)


@dataclass
class SweepResult:
    run_dir: Path
    summaries: list[LevelSummary]
    status: str


def plan_levels(load: LoadSettings) -> list[Level]:
    closed = [Level("concurrency", c) for c in load.concurrency]
    opened = [Level("rate", r, load.burstiness, load.max_concurrency) for r in load.rates]
    if not closed and not opened:
        raise ValueError("no levels to run: give --concurrency and/or --rate")
    return closed + opened


def run_sweep(plan: SweepPlan, launch: Launcher, progress: SweepProgress | None = None) -> SweepResult:
    """Launch (or attach to) the engine, run every level, and always leave a consistent run directory.

    The run directory exists before the engine starts, so a launched engine logs into it; if the engine
    never started and left no log, the empty directory is removed again."""
    plan.bounds()  # validate before anything starts
    run_dir = rundir.new_run_dir(plan.runs_root, plan.engine_kind, plan.scenario.name)
    run = _run_info(plan, run_dir)
    rundir.write_run_info(run_dir, run)
    status, started = "interrupted", False
    try:
        with launch(run_dir) as (endpoint, engine):
            started = True
            url = telemetry.metrics_url(endpoint.base_url)
            no_telemetry = telemetry.probe(url)
            run = replace(run, status="running", engine=asdict(engine), endpoint=_endpoint_json(endpoint),
                          telemetry={"metrics_url": url, "sampled": no_telemetry is None, "why_not": no_telemetry})
            rundir.write_run_info(run_dir, run)
            with telemetry.sampling(url, run_dir / rundir.TELEMETRY_FILE) if no_telemetry is None else nullcontext():
                _run_levels(plan, endpoint, engine, run_dir, progress)
        status = "complete"
    except Exception as exc:
        status = f"failed: {type(exc).__name__}: {exc}"
        raise
    finally:
        if not started and not (run_dir / rundir.ENGINE_LOG).exists():
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            rundir.write_run_info(run_dir, replace(run, status=status, finished_at=_now()))
            summaries = _resummarize(run_dir)
    return SweepResult(run_dir, summaries, status)


def _run_levels(
    plan: SweepPlan, endpoint: Endpoint, engine: EngineInfo, run_dir: Path, progress: SweepProgress | None
) -> None:
    load = plan.scenario.load
    options = ClientOptions(
        base_url=endpoint.base_url.rstrip("/"), model=endpoint.model, api_key=read_api_key(endpoint.api_key_env),
        request_timeout_s=load.request_timeout_s, temperature=plan.scenario.workload.temperature,
        strict_openai=plan.strict_openai, ignore_eos=plan.scenario.workload.ignore_eos,
    )
    workload = plan.scenario.workload
    specs = iter_requests(workload, plan.tokenizer)
    warmup_specs = iter_requests(workload.model_copy(update={"seed": workload.seed + WARMUP_SEED_OFFSET}),
                                 plan.tokenizer)
    bounds = plan.bounds()
    with JsonlWriter(run_dir / rundir.REQUESTS_FILE) as records, \
            JsonlWriter(run_dir / rundir.LEVELS_FILE) as levels:
        for level in plan.levels():
            if progress:
                progress.level_started(level, bounds)
            ctx = LevelContext(run_dir.name, engine.name, level, options, records,
                               on_record=progress.request_finished if progress else None)
            level_run = run_level_blocking(ctx, bounds, specs, warmup_specs)
            levels.write(asdict(level_run))
            summaries = _resummarize(run_dir)
            if progress:
                progress.level_finished(_find(summaries, level_run))


def _resummarize(run_dir: Path) -> list[LevelSummary]:
    try:
        summaries = rundir.summarize_run(run_dir)
    except rundir.RunDirError:
        return []
    rundir.write_summaries(run_dir, summaries)
    return summaries


def _find(summaries: list[LevelSummary], level_run: LevelRun) -> LevelSummary | None:
    return next((s for s in summaries if s.level == level_run.level), None)


def _endpoint_json(endpoint: Endpoint) -> dict[str, Any]:
    return {"base_url": endpoint.base_url, "model": endpoint.model, "api_key_env": endpoint.api_key_env}


def _run_info(plan: SweepPlan, run_dir: Path) -> RunInfo:
    return RunInfo(
        run_id=run_dir.name, status="starting", started_at=_now(),
        tool={"name": TOOL_NAME, "version": tool_version()}, engine={"name": plan.engine_kind},
        hardware=describe_host(), scenario=plan.scenario.model_dump(mode="json"),
        levels=[level.label for level in plan.levels()],
        client={"strict_openai": plan.strict_openai, "tokenizer": plan.tokenizer is not None},
        seeds={"requests": plan.scenario.workload.seed, "warmup": plan.scenario.workload.seed + WARMUP_SEED_OFFSET},
    )


def tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(TOOL_NAME)
    except PackageNotFoundError:
        return "unknown"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
