"""`bench sweep` and `bench capacity`: flags (or `--resume`) to jobs, the jobs run by `bench.flows.measure`,
the outcome printed with `display.show_outcome`; a bad flag ends the command with one line."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from bench.commands import stopping
from bench.commands.console import errors, fail
from bench.commands.engines_cmd import warn_about_leftovers
from bench.commands.flags import MeasureFlags
from bench.commands.helptext import CLUSTER, SLO, examples

if TYPE_CHECKING:  # imported where they are used, so that `bench --help` stays light
    from bench.flows.measure import Describe, Job, Outcome, Say
    from bench.inputs.options import LoadOverrides
    from loadgen.types import LevelSummary

SWEEP_EXAMPLES = examples("bench sweep --concurrency 1,8,32 --duration 30",
                          "bench sweep --engine vllm --model Qwen/Qwen2.5-0.5B-Instruct --rate 2,4,8",
                          "bench sweep --engine vllm --engine sglang --cluster auto --gpus-per-engine 1")
CAPACITY_EXAMPLES = examples("bench capacity --slo ttft_p95_ms=500 --slo tpot_p95_ms=40",
                             "bench capacity --engine vllm --rate --start 0.5 --repeats 3")


def sweep(
    flags: MeasureFlags,
    concurrency: str = typer.Option(None, metavar="N,N,...", help="Closed-loop levels, e.g. 1,8,50."),
    rate: str = typer.Option(None, metavar="N,N,...", help="Open-loop levels in requests/s, e.g. 2,4,8."),
    burstiness: float = typer.Option(None, metavar="SHAPE", help="Open loop: gamma shape; 1 = Poisson, < 1 burstier."),
    max_concurrency: int = typer.Option(None, metavar="N", help="Open loop: cap on requests in flight."),
    cluster: str = typer.Option(None, metavar="ADDRESS", rich_help_panel=CLUSTER,
                                help="A Ray cluster (auto, HOST:PORT or ray://HOST:PORT): each engine runs on a "
                                     "node Ray places it on, engine and load together, side by side up to what "
                                     "the cluster holds."),
    gpus_per_engine: float = typer.Option(None, min=0, metavar="K", rich_help_panel=CLUSTER,
                                          help="With --cluster: the GPUs each engine asks of its node [default: 0]."),
    cpus_per_engine: float = typer.Option(None, min=0, metavar="N", rich_help_panel=CLUSTER,
                                          help="With --cluster: the CPU cores each engine asks of its node, its "
                                               "threads (Ray sets OMP_NUM_THREADS to it) [default: 1]."),
) -> None:
    """Measure engines at each load level and write a run directory for each."""
    stopping.install()
    from bench.flows import measure
    from bench.inputs.options import LoadOverrides

    levels = LoadOverrides(concurrency=concurrency, rate=rate, burstiness=burstiness, max_concurrency=max_concurrency)
    if cluster is not None or (gpus_per_engine, cpus_per_engine) != (None, None):
        _sweep_on_cluster(flags, levels, cluster, gpus_per_engine, cpus_per_engine)
        return
    jobs, complete = _jobs(lambda say: measure.fresh_jobs(flags, levels, say=say), flags, "sweep", levels.given())
    _run(jobs, complete, flags)


def _sweep_on_cluster(flags: MeasureFlags, levels: LoadOverrides, cluster: str | None, gpus: float | None,
                      cpus: float | None) -> None:
    """Each engine on a node of the cluster, side by side (bench.flows.sweep_cluster); every flag is checked here
    before the cluster is joined."""
    from rich.markup import escape

    from bench.commands.display import RichJobWatcher
    from bench.flows import measure, sweep_cluster
    from bench.flows.placed import ClusterError
    from bench.flows.ray_placer import RayPlacer
    from bench.run.resume import ResumeError

    if cluster is None:
        fail("--gpus-per-engine and --cpus-per-engine say what each engine asks of a cluster's node; give "
             "--cluster ADDRESS with them")
    if flags.ray is not None:
        fail(f"--ray {flags.ray} --cluster {cluster}: with --cluster each engine's load comes from its own node; "
             "drop --ray (or --cluster, to put only the client's workers on Ray)")
    gpus, cpus = gpus if gpus is not None else 0.0, cpus if cpus is not None else 1.0
    watch = RichJobWatcher()
    try:
        if flags.resume:
            works, complete = sweep_cluster.resume_works(flags, levels.given(), watch.say)
            title = ""
        else:
            jobs = _jobs(lambda say: measure.fresh_jobs(flags, levels, say=say), flags, "sweep", levels.given())[0]
            works, complete, title = sweep_cluster.sweep_works(jobs, flags, levels), [], jobs[0].plan.scenario.name
        outcome = measure.Outcome((), ())
        if works:  # every run already complete: nothing to place
            placer = RayPlacer(cluster, gpus, cpus, per="engine")
            watch.say(f"placing {len(works)} engines on the cluster at {cluster}, each asking for {gpus:g} GPUs "
                      f"and {cpus:g} CPUs")
            outcome = sweep_cluster.run_works(works, placer, watch)
    except (ClusterError, ResumeError) as exc:
        fail(str(exc))
    except sweep_cluster.SweepInterrupted as stopped:
        again = shlex.join(["bench", "sweep", *[a for d in stopped.run_dirs for a in ("--resume", str(d))],
                            "--cluster", cluster, "--gpus-per-engine", f"{gpus:g}", "--cpus-per-engine", f"{cpus:g}"])
        never = f"; not started: {', '.join(stopped.not_started)}" if stopped.not_started else ""
        kept = f"every level shipped is kept in its run directory (go on with {again})" if stopped.run_dirs \
            else "nothing was measured yet"
        errors.print(f"[yellow]interrupted:[/] {escape(kept + never)}", markup=True, highlight=False)
        raise typer.Exit(stopping.exit_code()) from None
    except KeyboardInterrupt:  # while Ray was being joined, or the shipped runs read: nothing more to stop
        errors.print("[yellow]interrupted[/]", markup=True, highlight=False)
        raise typer.Exit(stopping.exit_code()) from None
    _finish(outcome, complete, flags, title)


# Shared flags a capacity search has no use for (bench.commands.flags.measure_command refuses them with this).
CAPACITY_REFUSES = {
    "adapter_counts": "a sweep's dimension: a capacity search runs one adapter mix (give --adapters with the "
                      "adapters to search with, or use bench sweep --adapter-counts)",
}


def capacity(
    flags: MeasureFlags,
    slo: list[str] = typer.Option(None, metavar="KEY=MS", rich_help_panel=SLO,
                                  help="A latency target the search must meet, KEY=MILLISECONDS: "
                                       "ttft_p95_ms, ttfvt_p95_ms, tpot_p95_ms or e2e_p95_ms (repeatable; "
                                       "default: the scenario's SLO)."),
    attainment: float = typer.Option(None, metavar="FRACTION", rich_help_panel=SLO,
                                     help="Share of requests that must meet every target (default: the "
                                          "scenario's, 0.95)."),
    tolerance: float = typer.Option(0.05, metavar="FRACTION",
                                    help="Stop when the highest passing and lowest failing loads are within "
                                         "this share of each other (never finer than one user)."),
    start: float = typer.Option(1.0, metavar="LOAD", help="The first load probed (users, or requests/s with --rate)."),
    rate: bool = typer.Option(False, "--rate", help="Search the arrival rate (open loop) instead of the users."),
    max_load: float = typer.Option(None, metavar="LOAD", help="The highest load to probe."),
    max_probes: int = typer.Option(20, metavar="N", help="The most probes a search runs."),
    burstiness: float = typer.Option(None, metavar="SHAPE",
                                     help="With --rate: gamma shape; 1 = Poisson, < 1 burstier."),
    max_concurrency: int = typer.Option(None, metavar="N", help="With --rate: cap on requests in flight."),
) -> None:
    """Find the highest load one replica carries within the SLO, and write capacity.json.

    The search ramps the load up until a probe fails, then narrows down between the last pass and the first fail."""
    stopping.install()
    from bench.flows import measure
    from bench.flows.capacity import CapacityAsk

    ask = CapacityAsk(slo=slo, attainment=attainment, tolerance=tolerance, start=start, rate=rate, max_load=max_load,
                      max_probes=max_probes, burstiness=burstiness, max_concurrency=max_concurrency)
    jobs, complete = _jobs(lambda say: measure.capacity_jobs(flags, ask, say), flags, "capacity", ask.given())
    _run(jobs, complete, flags, describe=_describe_probe)


def _jobs(fresh: Callable[[Say], list[Job]], flags: MeasureFlags, command: str,
          given: list[str]) -> tuple[list[Job], list[Path]]:
    """The jobs of a fresh run or of `--resume`; a bad flag ends the command with one line."""
    from bench.commands.display import RichJobWatcher
    from bench.flows import measure
    from bench.inputs.scenario import ScenarioError
    from bench.run.resume import ResumeError
    from engines.endpoint import EndpointError
    from engines.launch import EngineStartError
    from engines.registry import EngineError

    try:
        say = RichJobWatcher().say
        if flags.resume:
            return measure.resumed_jobs(flags, command, given, say)
        return fresh(say), []
    except (ScenarioError, EndpointError, EngineError, EngineStartError, ResumeError, ValueError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(stopping.exit_code()) from None


def _run(jobs: list[Job], complete: list[Path], flags: MeasureFlags,
         describe: Callable[[Job], Describe | None] | None = None) -> None:
    """Run the jobs, print and report what they measured; exit 1 when an engine failed."""
    from bench.commands.display import RichJobWatcher
    from bench.flows import measure
    from engines.registry import is_container_kind

    warn_about_leftovers(containers=any(is_container_kind(str(job.plan.engine_spec.get("engine"))) for job in jobs))
    try:
        outcome = measure.run_jobs(jobs, RichJobWatcher(describe))
    except KeyboardInterrupt:
        errors.print("[yellow]interrupted:[/] every request finished so far is kept in the run directory "
                     "(go on with --resume RUN_DIR)")
        raise typer.Exit(stopping.exit_code()) from None
    _finish(outcome, complete, flags, jobs[0].plan.scenario.name if jobs else "")


def _finish(outcome: Outcome, complete: list[Path], flags: MeasureFlags, title: str) -> None:
    """What was measured reported and printed; exit 1 when an engine failed."""
    from dataclasses import replace

    from bench.commands.display import show_outcome
    from bench.flows import measure

    if flags.report and outcome.results:
        read = [r.run or r.run_dir for r in outcome.results]  # each run as its sweep read it: not read again
        resumed_in = {run_dir.parent for run_dir in flags.resume or []}
        # a resumed sweep's comparison goes beside its runs, not into a runs folder where the command was typed
        out = resumed_in.pop() if len(resumed_in) == 1 else flags.out
        outcome = replace(outcome, reports=measure.write_reports(read, out))
    outcome = replace(outcome, already_complete=tuple(complete))
    show_outcome(outcome, title)
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)


def _describe_probe(job: Job) -> Describe:
    """After each probe of a capacity search: its load, verdict and the figures it was judged by."""
    from bench.flows.capacity import judge

    plan = job.plan.capacity
    assert plan is not None, "a capacity command's jobs are searches (resume refuses a sweep's run)"

    def describe(summary: LevelSummary | None) -> str | None:
        if summary is None:
            return None
        probe = judge(summary, summary.target, plan)
        why = f" ({'; '.join(probe.reasons)})" if probe.reasons else ""
        carried, latency = summary.throughput, summary.latency
        return (f"  probe {summary.level}: {probe.verdict}{why}: {carried.output_tokens_per_s:,.0f} output tokens/s, "
                f"p95 TTFT {_ms(latency.ttft_ms.p95)}, p95 TPOT {_ms(latency.tpot_ms.p95)}, "
                f"SLO met by {carried.slo_attainment:.0%}")

    return describe


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"

