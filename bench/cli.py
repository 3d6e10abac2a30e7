"""The `bench` command line: thin shells over library functions, printing with rich.

Imports stay light (no torch): `bench --help` must answer at once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.markup import escape

from bench import report_cmd, stopping
from bench.console import console, errors, fail, warn

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Measure LLM inference engines on your hardware; decide whether to self-host.")
app.command("report")(report_cmd.report)
app.command("cost")(report_cmd.cost)


@app.command()
def sweep(
    engine: list[str] = typer.Option(None, help="Engine kind (default: reference), repeatable to compare engines "
                                                "on the same workload: see `bench engines`."),
    base_url: str = typer.Option(None, help="Endpoint base URL, ending in /v1."),
    model: str = typer.Option(None, help="Model: for endpoint, the name the server lists; for reference, a .gguf "
                                         "file, a safetensors directory, dummy:<preset> or default (SmolLM2-135M)."),
    engine_arg: list[str] = typer.Option(None, help="KEY=VALUE passed to a launched engine as --KEY VALUE "
                                                    "(repeatable), e.g. batching=static."),
    port: int = typer.Option(None, help="Port for a launched engine (default: a free one)."),
    engine_file: list[Path] = typer.Option(None, help="Engine spec in YAML (engine, model, flags); repeatable."),
    api_key_env: str = typer.Option(None, help="NAME of the environment variable holding the API key."),
    scenario: str = typer.Option("chat", help="Scenario file, or the name of a shipped one."),
    concurrency: str = typer.Option(None, help="Closed-loop levels, e.g. 1,8,50."),
    rate: str = typer.Option(None, help="Open-loop levels in requests/s, e.g. 2,4,8."),
    burstiness: float = typer.Option(None, help="Open loop: gamma shape; 1 = Poisson, < 1 burstier."),
    max_concurrency: int = typer.Option(None, help="Open loop: cap on requests in flight."),
    duration: float = typer.Option(None, help="Seconds per level."),
    requests: int = typer.Option(None, help="Requests per level (with --duration: whichever ends first)."),
    warmup: int = typer.Option(None, help="Warm-up requests per level (default: one per user)."),
    input_tokens: str = typer.Option(None, help="Prompt length: N | uniform:MIN:MAX | normal:MEAN:STD[:MIN:MAX] | "
                                                "lognormal:MEAN:STD[:MIN:MAX]."),
    output_tokens: str = typer.Option(None, help="Output length, same forms as --input-tokens."),
    shared_prefix: str = typer.Option(None, help="GROUPS:TOKENS: each group shares a system prompt."),
    turns: int = typer.Option(None, help="Multi-turn chat: each user holds conversations of this many turns, "
                                         "every turn sending the conversation so far (1 = single requests)."),
    api: str = typer.Option(None, help="chat or completions."),
    seed: int = typer.Option(None, help="Seed of the request stream."),
    request_timeout: float = typer.Option(None, help="Seconds before a request counts as timed out."),
    tokenizer: Path = typer.Option(None, help="A tokenizer.json to build prompts of exact token counts."),
    strict_openai: bool = typer.Option(False, help="Send only OpenAI's published fields (for providers)."),
    out: Path = typer.Option(Path("runs"), help="Directory that holds the run directories."),
    report: bool = typer.Option(True, help="Write the decision report (HTML, Markdown, JSON) at the end."),
) -> None:
    """Measure an engine at each load level and write a run directory."""
    stopping.install()
    from bench.display import RichSweepProgress, summary_table
    from bench.options import SweepOverrides, build_scenario
    from bench.scenario import ScenarioError
    from bench.sweep import SweepPlan, run_sweep
    from engines.endpoint import EndpointError
    from engines.engine_file import EngineFile, load_engine_file
    from engines.launch import EngineStartError
    from engines.process import parse_engine_args
    from engines.registry import EngineError, is_container_kind, make_launcher

    overrides = SweepOverrides(
        concurrency=concurrency, rate=rate, burstiness=burstiness, max_concurrency=max_concurrency,
        duration=duration, requests=requests, warmup=warmup, input_tokens=input_tokens,
        output_tokens=output_tokens, shared_prefix=shared_prefix, turns=turns, api=api, seed=seed,
        request_timeout=request_timeout,
    )
    try:
        resolved = build_scenario(scenario, overrides)
        prompt_tokenizer = _load_tokenizer(tokenizer)
        kinds = engine or ([] if engine_file else ["reference"])
        specs = [EngineFile(engine=kind, model=model, base_url=base_url, api_key_env=api_key_env, port=port,
                            args=parse_engine_args(engine_arg or [])) for kind in kinds]
        specs += [load_engine_file(path) for path in engine_file or []]
        runs = [(SweepPlan(resolved, out, engine_kind=spec.name or spec.engine, strict_openai=strict_openai,
                           tokenizer=prompt_tokenizer), make_launcher(spec)) for spec in specs]
    except (ScenarioError, EngineError, EngineStartError, ValueError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(stopping.exit_code()) from None
    _warn_about_leftovers(containers=any(is_container_kind(spec.engine) for spec in specs))
    results = []
    for plan, launcher in runs:
        try:
            with RichSweepProgress(console) as progress:
                results.append(run_sweep(plan, launcher, progress))
        except (EndpointError, EngineError, EngineStartError) as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            errors.print("[yellow]interrupted:[/] every request finished so far is kept in the run directory")
            raise typer.Exit(stopping.exit_code()) from None
    console.print(summary_table([s for result in results for s in result.summaries], title=resolved.name))
    for result in results:
        _print_server_view(result.run_dir)
        console.print(f"run directory: {result.run_dir}")
    if report:
        _write_reports([result.run_dir for result in results], out)


def _write_reports(run_dirs: list[Path], out: Path) -> None:
    """One report per run, and one that compares them when several engines were swept. A report that
    can't be made (e.g. the scenario names no GPU price) is a warning: the measurements are safe."""
    from bench.report import ReportError, render_report, render_run_report
    from costmodel.prices import PriceError

    try:
        for run_dir in run_dirs:
            if (path := render_run_report(run_dir)) is not None:
                console.print(f"report: {path}")
        if len(run_dirs) > 1:
            combined = render_report(run_dirs, out / f"compare-{run_dirs[0].name}.html")
            console.print(f"comparison report: {combined.files.html}")
    except (ReportError, PriceError) as exc:
        errors.print(f"[yellow]no report:[/] {escape(str(exc))} (run `bench report` with the missing options)")


@app.command()
def summarize(run_dir: Path = typer.Argument(..., help="A run directory written by `bench sweep`.")) -> None:
    """Recompute a run's summary from its records alone, and print it."""
    from bench.display import summary_table
    from bench.rundir import RunDirError, summarize_run, write_summaries

    try:
        summaries = summarize_run(run_dir)
    except RunDirError as exc:
        fail(str(exc))
    write_summaries(run_dir, summaries)
    console.print(summary_table(summaries, title=str(run_dir)))
    _print_server_view(run_dir)


def _print_server_view(run_dir: Path) -> None:
    from bench.display import server_view_table
    from bench.rundir import server_views

    views = server_views(run_dir)
    if views:
        console.print(server_view_table(views, title=f"the server's own metrics: {run_dir.name}"))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, add_help_option=False)
def serve(ctx: typer.Context) -> None:
    """Run the reference engine alone: an OpenAI-compatible server for any client or chat UI.

    Takes the engine's own flags (`bench serve --help` lists them): --model, --port, --batching, ..."""
    from engines.reference.serving.options import parse_args

    stopping.install()
    options = parse_args(ctx.args, prog="bench serve")  # --help and a bad flag end here, as argparse does
    try:
        from engines.reference.serving.server import serve as serve_forever

        stopped_by = serve_forever(options)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:  # a stop signal while the model was still loading
        raise typer.Exit(stopping.exit_code()) from None
    raise typer.Exit(128 + stopped_by if stopped_by else 0)


@app.command()
def compare(run_dirs: list[Path] = typer.Argument(..., help="Run directories to put side by side.")) -> None:
    """Several runs side by side: each level of each engine, with output tokens/s relative to the first run."""
    from bench.display import comparison_table
    from bench.rundir import RunDirError, summarize_run

    try:
        runs = [(run_dir, summarize_run(run_dir)) for run_dir in run_dirs]
    except RunDirError as exc:
        fail(str(exc))
    console.print(comparison_table(runs))


@app.command()
def engines() -> None:
    """Every engine kind, and whether it can run on this machine (and why not)."""
    from bench.display import engines_table
    from engines.availability import availability

    console.print(engines_table(availability()))


def _load_tokenizer(path: Path | None):  # type: ignore[no-untyped-def]
    if path is None:
        return None
    if not path.is_file():
        raise ValueError(f"--tokenizer {path}: no such file (expected a Hugging Face tokenizer.json)")
    from loadgen.datasets import TokenizerFile

    return TokenizerFile(path)


@app.command()
def clean(dry_run: bool = typer.Option(False, help="Only list what would be removed.")) -> None:
    """Stop the engine processes and remove the containers that a bench command which died left behind."""
    from engines import lifeline
    from engines.docker import docker_client
    from engines.launch import EngineStartError

    try:
        client = docker_client()
    except EngineStartError as exc:
        client = None
        errors.print(f"containers not checked: {escape(str(exc))}", highlight=False)
    found = lifeline.leftover_processes() + (lifeline.leftover_containers(client) if client else [])
    if not found:
        console.print("nothing left behind")
        return
    for item in found:
        console.print(f"{'would remove' if dry_run else 'removing'} {item.describe()}", highlight=False)
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


def main() -> None:  # pragma: no cover - the console script calls `app`
    app()
    sys.exit(0)

