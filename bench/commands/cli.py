"""The `bench` command line: thin shells over library functions, printing with rich.

Imports stay light (no torch): `bench --help` must answer at once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from bench.commands import doctor_cmd, lora_cmd, plan_cmd, quality_cmd, report_cmd, stopping, tune_cmd
from bench.commands.console import console, errors, fail, warn
from bench.commands.flags import MeasureFlags, measure_command
from bench.commands.helptext import OUTPUT, SLO, BenchTyper, examples

if TYPE_CHECKING:  # imported where they are used, so that `bench --help` stays light
    import argparse

    from bench.flows.measure import Describe, Job, Say
    from engines.reference.serving.options import ServerOptions
    from loadgen.types import LevelSummary

app = BenchTyper(add_completion=False, no_args_is_help=True,
                 help="Measure LLM inference engines on your hardware; decide whether to self-host.",
                 epilog=examples("bench sweep --concurrency 1,8,32", "bench report runs/RUN_DIR --gpu h100-sxm",
                                 "bench cost --throughput 2400 --gpu h100-sxm --provider llama-3.1-8b"))


@measure_command
def sweep(
    flags: MeasureFlags,
    concurrency: str = typer.Option(None, metavar="N,N,...", help="Closed-loop levels, e.g. 1,8,50."),
    rate: str = typer.Option(None, metavar="N,N,...", help="Open-loop levels in requests/s, e.g. 2,4,8."),
    burstiness: float = typer.Option(None, metavar="SHAPE", help="Open loop: gamma shape; 1 = Poisson, < 1 burstier."),
    max_concurrency: int = typer.Option(None, metavar="N", help="Open loop: cap on requests in flight."),
) -> None:
    """Measure engines at each load level and write a run directory for each."""
    stopping.install()
    from bench.flows import measure
    from bench.inputs.options import LoadOverrides

    given = _given(concurrency=(concurrency, None), rate=(rate, None), burstiness=(burstiness, None),
                   max_concurrency=(max_concurrency, None))
    levels = LoadOverrides(concurrency=concurrency, rate=rate, burstiness=burstiness, max_concurrency=max_concurrency)
    jobs, complete = _jobs(lambda say: measure.fresh_jobs(flags, levels, say=say), flags, "sweep", given)
    _run(jobs, complete, flags)


@measure_command
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
    from bench.flows.capacity import CapacityPlan, parse_slo_flags
    from bench.flows.search import SearchSettings
    from bench.inputs.options import LoadOverrides, scenario_overrides

    given = _given(slo=(slo, None), attainment=(attainment, None), tolerance=(tolerance, 0.05), start=(start, 1.0),
                   rate=(rate, False), max_load=(max_load, None), max_probes=(max_probes, 20),
                   burstiness=(burstiness, None), max_concurrency=(max_concurrency, None))

    def fresh(say: Say) -> list[measure.Job]:
        levels = LoadOverrides(burstiness=burstiness, max_concurrency=max_concurrency)
        scenario = measure.build_scenario(flags.scenario or measure.DEFAULT_SCENARIO, scenario_overrides(flags, levels))
        target = attainment if attainment is not None else scenario.pricing.slo_attainment_target
        if not 0 < target <= 1:
            raise ValueError(f"--attainment {target:g}: expected a share in (0, 1], e.g. 0.95")
        search = SearchSettings("rate" if rate else "concurrency", start, tolerance=tolerance, max_load=max_load,
                                max_probes=max_probes)
        plan = CapacityPlan(search, parse_slo_flags(slo or [], scenario.slo), target, flags.repeats or 1,
                            scenario.load.burstiness, scenario.load.max_concurrency)
        return measure.fresh_jobs(flags, levels, plan, lambda s: measure.with_slo(s, plan.slo, target), say)

    jobs, complete = _jobs(fresh, flags, "capacity", given)
    _run(jobs, complete, flags, describe=_describe_probe)


def _given(**values: tuple[object, object]) -> list[str]:
    """The flags given with a value other than their default, as --names."""
    return [f"--{name.replace('_', '-')}" for name, (value, default) in values.items() if value not in (default, [])]


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
    from dataclasses import replace

    from bench.commands.display import RichJobWatcher, show_outcome
    from bench.flows import measure
    from engines.registry import is_container_kind

    _warn_about_leftovers(containers=any(is_container_kind(str(job.plan.engine_spec.get("engine"))) for job in jobs))
    try:
        outcome = measure.run_jobs(jobs, RichJobWatcher(describe))
    except KeyboardInterrupt:
        errors.print("[yellow]interrupted:[/] every request finished so far is kept in the run directory "
                     "(go on with --resume RUN_DIR)")
        raise typer.Exit(stopping.exit_code()) from None
    if flags.report and outcome.results:
        read = [r.run or r.run_dir for r in outcome.results]  # each run as its sweep read it: not read again
        outcome = replace(outcome, reports=measure.write_reports(read, flags.out))
    outcome = replace(outcome, already_complete=tuple(complete))
    show_outcome(outcome, jobs[0].plan.scenario.name if jobs else "")
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


def summarize(run_dir: Path = typer.Argument(..., metavar="RUN_DIR",
                                             help="A run directory written by `bench sweep`.")) -> None:
    """Recompute a run's summary from its records alone, and print it.

    With its capacity, if it searched; its repeats, sessions, grades and adapters, where it has them."""
    from bench.commands.display import show_runs
    from bench.run.rundir import RunDirError, read_run, write_summaries

    try:
        run = read_run(run_dir)
    except RunDirError as exc:
        fail(str(exc))
    if not run.summaries:
        fail(f"{run_dir}: no requests.jsonl; the sweep ended before any request finished")
    write_summaries(run_dir, list(run.summaries))
    show_runs([(run_dir, run)], title=str(run_dir))


def serve(ctx: typer.Context) -> None:
    """Run the reference engine alone: an OpenAI-compatible server for any client or UI.

    Takes the engine's own flags (`bench serve --help` lists them): --model, --port, --batching, ...; and
    --replicas N [--router-policy P] (behind vllm-router), --ui [--ui-port P] [--ui-python PY] [--ui-data DIR]
    (Open WebUI in front)."""
    from engines.reference.serving.options import parse_args

    stopping.install()
    if any(arg in ("-h", "--help") for arg in ctx.args):
        _serve_help()
        return
    stack, argv = _stack_flags(ctx.args)
    options = parse_args(argv, prog="bench serve")  # --help and a bad flag end here, as argparse does
    if stack.replicas is not None or stack.ui:
        _serve_stack(argv, options, stack)
        return
    try:
        from engines.reference.serving.server import serve as serve_forever

        stopped_by = serve_forever(options)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:  # a stop signal while the model was still loading
        raise typer.Exit(stopping.exit_code()) from None
    raise typer.Exit(128 + stopped_by if stopped_by else 0)


def _stack_flags(args: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """`bench serve`'s own flags (replicas, router, UI) taken out of its arguments; the rest are the engine's."""
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    _add_stack_flags(parser)
    return parser.parse_known_args(args)


def _add_stack_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--replicas", type=int, metavar="N", help="run N replicas of the engine behind vllm-router")
    parser.add_argument("--router-policy", default="round_robin", metavar="POLICY",
                        help="the router's policy with --replicas: round_robin (default), cache_aware, power_of_two, "
                             "random, consistent_hash")
    parser.add_argument("--router-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to vllm-router as --KEY VALUE (repeatable), e.g. balance-abs-threshold=4")
    parser.add_argument("--ui", action="store_true", help="Open WebUI in front of the engine")
    parser.add_argument("--ui-port", type=int, default=8080, metavar="PORT", help="the UI's port (default 8080)")
    parser.add_argument("--ui-python", metavar="PYTHON",
                        help="the Python of Open WebUI's environment (default: $BENCH_OPENWEBUI)")
    parser.add_argument("--ui-data", type=Path, default=Path.home() / ".local" / "share" / "bench" / "openwebui",
                        metavar="DIR",
                        help="where the UI keeps its data and the account it signs in with")


SERVE_EXAMPLES = examples("bench serve --model default --port 8000",
                          "bench serve --model default --replicas 2 --router-policy cache_aware",
                          "bench serve --model default --ui")


def _serve_help() -> None:
    """The engine's flags and `bench serve`'s own (replicas, router, UI), in one help, examples last."""
    import argparse

    from engines.reference.serving.options import build_parser

    parser = build_parser("bench serve")
    _add_stack_flags(parser.add_argument_group("bench serve's own flags (a stack around the engine)"))
    parser.formatter_class, parser.epilog = argparse.RawDescriptionHelpFormatter, SERVE_EXAMPLES  # a line each
    parser.print_help()


def _serve_stack(argv: list[str], options: ServerOptions, stack: argparse.Namespace) -> None:
    """The reference engine (or N replicas behind vllm-router), with Open WebUI in front when asked, until
    Ctrl-C (or SIGTERM); everything stopped then, the UI first."""
    import tempfile
    import time
    from contextlib import ExitStack

    from engines.launch import EngineStartError
    from engines.openwebui import CREDENTIALS, find_openwebui, launch_openwebui
    from engines.process import launch_reference_argv, parse_engine_args
    from engines.reference.serving.options import api_key_of
    from engines.replicas import budgeted, launch_replicas

    logs = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    engine_port = options.port or None
    api_key = api_key_of(options)  # to the engines in their environment, never on their command line
    argv = _without(argv, "--api-key", "--api-key-env")
    try:
        if stack.ui:
            find_openwebui(stack.ui_python)  # said before the engine loads
        with ExitStack() as running:
            if stack.replicas is not None:
                argv = _without(argv, "--port", "--host")
                replicas = budgeted(lambda budget: lambda run_dir: launch_reference_argv(
                    run_dir, argv, env=budget.env(), cpus=budget.cpus, api_key=api_key), stack.replicas)
                endpoint, info = running.enter_context(launch_replicas(
                    replicas, logs, stack.router_policy, engine_port,
                    router_args=dict(parse_engine_args(stack.router_arg))))
                urls = ", ".join(r["base_url"] for r in info.details["replicas"])
                console.print(f"{info.name} behind vllm-router ({stack.router_policy}) at {endpoint.base_url} "
                              f"(replicas: {urls}), model {endpoint.model}", highlight=False, soft_wrap=True)
            else:
                endpoint, info = running.enter_context(launch_reference_argv(
                    logs, _without(argv, "--host", "--port"), port=engine_port, api_key=api_key))
                console.print(f"reference engine at {endpoint.base_url}, model {endpoint.model}", highlight=False)
            if stack.ui:
                ui = running.enter_context(launch_openwebui(logs, endpoint, stack.ui_data, stack.ui_port,
                                                            stack.ui_python))
                console.print(f"Open WebUI {ui.version or ''} at {ui.root}: sign in as {ui.account.email} with "
                              f"password {ui.account.password} (kept in {stack.ui_data / CREDENTIALS})",
                              highlight=False, soft_wrap=True)
                console.print(_ui_data_note(stack.ui_data), highlight=False, soft_wrap=True)
            console.print(f"logs in {logs}. Ctrl-C stops them all.", highlight=False)
            while True:
                time.sleep(3600)
    except (EngineStartError, ValueError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        if stack.ui:
            console.print(f"stopped; {_ui_data_note(stack.ui_data)}", highlight=False, soft_wrap=True)
        raise typer.Exit(stopping.exit_code()) from None


def _ui_data_note(data: Path) -> str:
    return (f"Open WebUI's data (accounts, API keys, chats) stays in {data}, its owner's only (0700), for the next "
            f"start; remove it with: rm -rf {data}")


def _without(argv: list[str], *flags: str) -> list[str]:
    """`argv` less each of `flags` and its value (`--port 8000` or `--port=8000`)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        elif not any(arg.startswith(flag + "=") for flag in flags):
            kept.append(arg)
    return kept


def import_(
    files: list[Path] = typer.Argument(..., metavar="FILE",
                                       help="Result files: vLLM's `vllm bench serve --save-result` JSON (a "
                                            "level each), guidellm's benchmarks.json (a level per "
                                            "strategy), aiperf's profile_export_aiperf.json (a level each). "
                                            "Files at the same load are its repeats."),
    from_: str = typer.Option(..., "--from", metavar="TOOL",
                              help="The tool that wrote them: vllm, guidellm or aiperf."),
    engine: str = typer.Option(None, metavar="NAME",
                               help="The engine that served them (vllm, sglang, ...), where the files don't "
                                    "say it: they name the client's backend, not the server."),
    out: Path = typer.Option(Path("runs"), metavar="DIR", rich_help_panel=OUTPUT,
                             help="Directory that holds the run directories."),
) -> None:
    """Turn another tool's saved results into a run directory.

    bench report, compare and cost then read it like a measured one."""
    from bench.flows.importing import import_results
    from bench.imports import ImportFileError

    try:
        run_dir = import_results(files, from_, out, engine)
    except ImportFileError as exc:
        fail(str(exc))
    console.print(f"run directory: {run_dir}", highlight=False)


def history(
    runs: Path = typer.Option(Path("runs"), metavar="DIR",
                              help="The runs folder whose history to read (.history/ in it)."),
    engine: str = typer.Option(None, metavar="NAME",
                               help="Only this engine (its name in run.json: reference, vllm, endpoint, ...)."),
    model: str = typer.Option(None, metavar="MODEL", help="Only this model (as the engine served it)."),
    level: str = typer.Option(None, metavar="LEVEL", help="Only this level, e.g. c32."),
    metric: str = typer.Option("output_tokens_per_s", metavar="METRIC",
                               help="output_tokens_per_s, request_per_s, ttft_p50_ms, ttft_p95_ms, tpot_p50_ms or "
                                    "e2e_p50_ms."),
    import_runs: list[Path] = typer.Option(None, "--import", metavar="RUN_DIR",
                                           help="Run directories made before the history existed, added to it "
                                                "(repeatable)."),
) -> None:
    """Each configuration's trend, run after run, and whether the newest one regressed.

    A regression is a newest run outside the 95 % interval of the earlier ones; writes history.html with the
    plots, and exits 1 on a regression."""
    from bench.commands.display import history_table
    from bench.flows.history import write_history_page
    from bench.run import history as hist
    from bench.run.rundir import RunDirError, read_run

    if import_runs:
        added = 0
        for run_dir in import_runs:
            try:
                run = read_run(run_dir)
            except RunDirError as exc:
                fail(str(exc))
            if not run.summaries:
                fail(f"--import {run_dir}: no measured level in it")
            added += hist.record_run(run, runs)
        console.print(f"{added} levels of {len(import_runs)} run(s) added to {hist.history_path(runs)}", markup=False)
    try:
        trends = hist.trends(runs, metric, engine, model, level)
    except hist.HistoryError as exc:
        fail(str(exc))
    if not trends:
        fail("no run of the history matches --engine / --model / --level")
    console.print(history_table(trends))
    page = write_history_page(trends, metric, hist.history_path(runs).parent / "history.html")
    console.print(f"history: {page}", highlight=False, markup=False)
    if any(t.verdict == "regression" for t in trends):
        raise typer.Exit(1)


def export(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run directory written by `bench sweep`."),
    format: str = typer.Option(..., "--format", metavar="llmd-report|csv",
                               help="llmd-report (llm-d's Benchmark Report 0.1, one JSON file a level) or csv (one "
                                    "row a level, every figure)."),
    out: Path = typer.Option(None, metavar="DIR", rich_help_panel=OUTPUT,
                             help="Folder to write in (default: the run directory)."),
) -> None:
    """Write a run in another tool's format: llm-d's Benchmark Report, or CSV.

    A CSV has one row a level with every figure, for a spreadsheet."""
    from bench.flows.export import ExportError, export_run

    try:
        written = export_run(run_dir, format, out)
    except ExportError as exc:
        fail(str(exc))
    for path in written:
        console.print(str(path), highlight=False)


def compare(run_dirs: list[Path] = typer.Argument(..., metavar="RUN_DIR",
                                                  help="Run directories to put side by side.")) -> None:
    """Put several runs side by side, level by level.

    Each level of each engine, with output tokens/s relative to the first run."""
    from bench.commands.display import comparison_table
    from bench.run.rundir import RunDirError, read_run

    try:
        runs = [read_run(run_dir) for run_dir in run_dirs]
    except RunDirError as exc:
        fail(str(exc))
    console.print(comparison_table([(run.run_dir, run.info.source(), list(run.summaries)) for run in runs]))


def engines() -> None:
    """Every engine kind, and whether it can run on this machine (and why not)."""
    from bench.commands.display import engines_table
    from engines.availability import availability

    console.print(engines_table(availability()))


def clean(dry_run: bool = typer.Option(False, help="Only list what would be removed.")) -> None:
    """Stop the engines and remove the containers a bench command that died left behind."""
    from engines import lifeline
    from engines.docker import docker_client
    from engines.launch import EngineStartError

    try:
        client = docker_client()
    except EngineStartError as exc:
        client = None
        errors.print(f"containers not checked: {escape(str(exc))}", highlight=False)
    found = lifeline.leftover_processes() + (lifeline.leftover_containers(client) if client else [])
    elsewhere = lifeline.containers_elsewhere(client) if client else []
    if elsewhere:  # on a daemon other hosts share: whether their commands still run is for their hosts to tell
        names = ", ".join(f"{item.name} (host {item.host or 'not named'})" for item in elsewhere)
        console.print(f"left alone {len(elsewhere)} container(s) that another host started or that name no host "
                      f"(an older bench's), since this host can't tell whether their commands still run: {names}; "
                      "remove one that is yours with `docker rm -f NAME`", highlight=False, markup=False,
                      soft_wrap=True)
    if not found:
        console.print("nothing left behind")
        return
    for item in found:
        console.print(f"{'would remove' if dry_run else 'removing'} {item.describe()}", highlight=False, markup=False)
    if not dry_run:
        lifeline.remove_leftovers(found, client)


def _warn_about_leftovers(containers: bool) -> None:
    """Engines an earlier command left running hold ports, memory and GPUs: say so before measuring."""
    from engines import lifeline

    found = lifeline.leftover_processes()
    if containers:
        from engines.docker import docker_client
        from engines.launch import EngineStartError

        try:
            found += lifeline.leftover_containers(docker_client())
        except EngineStartError:
            pass
    if found:
        names = ", ".join(item.describe() for item in found[:5]) + (" ..." if len(found) > 5 else "")
        warn(f"{len(found)} engine(s) left running by a bench command that died: {names}; `bench clean` removes them")


# Registered in the order a user works: measure, decide, look at the results, then tools (their panels and
# order in `bench --help`: helptext.COMMAND_PANELS).
app.command("sweep", epilog=examples(
    "bench sweep --concurrency 1,8,32 --duration 30",
    "bench sweep --engine vllm --model Qwen/Qwen2.5-0.5B-Instruct --rate 2,4,8",
    "bench sweep --dataset prompts.jsonl --concurrency 8 --repeats 3"))(sweep)
app.command("capacity", epilog=examples(
    "bench capacity --slo ttft_p95_ms=500 --slo tpot_p95_ms=40",
    "bench capacity --engine vllm --rate --start 0.5 --repeats 3"))(capacity)
app.command("tune", epilog=tune_cmd.EXAMPLES)(measure_command(tune_cmd.tune))
app.command("quality", epilog=quality_cmd.EXAMPLES)(measure_command(quality_cmd.quality))
app.command("report", epilog=report_cmd.REPORT_EXAMPLES)(report_cmd.report)
app.command("cost", cls=report_cmd.CostHelpCommand, epilog=report_cmd.COST_EXAMPLES)(report_cmd.cost)
app.command("plan", epilog=plan_cmd.EXAMPLES)(plan_cmd.plan)
app.command("compare", epilog=examples(
    "bench compare runs/RUN_A runs/RUN_B",
    "bench compare runs/*-reference-chat runs/*-vllm-chat"))(compare)
app.command("summarize", epilog=examples(
    "bench summarize runs/RUN_DIR",
    "bench summarize runs/tune-FOLDER/RUN_DIR"))(summarize)
app.command("import", epilog=examples(
    "bench import results/c8.json results/c32.json --from vllm",
    "bench import benchmarks.json --from guidellm --engine vllm"))(import_)
app.command("export", epilog=examples(
    "bench export runs/RUN_DIR --format llmd-report",
    "bench export runs/RUN_DIR --format csv --out sheets/"))(export)
app.command("history", epilog=examples(
    "bench history",
    "bench history --engine vllm --level c32 --metric ttft_p95_ms",
    "bench history --import runs/RUN_DIR"))(history)
app.command("serve", add_help_option=False,
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(serve)
app.command("engines", epilog=examples("bench engines", "bench engines | grep vllm"))(engines)
app.add_typer(lora_cmd.app, name="lora")
app.command("clean", epilog=examples("bench clean --dry-run", "bench clean"))(clean)
app.command("doctor", rich_help_panel="Serve and tools", epilog=doctor_cmd.EXAMPLES)(doctor_cmd.doctor)


def main() -> None:  # pragma: no cover - the console script calls `app`
    app()
    sys.exit(0)

