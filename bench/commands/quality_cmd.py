"""`bench quality`: ask each engine the same eval, greedy, and compare the answers.

    bench quality                                         # the shipped eval on the reference engine
    bench quality --eval my_eval.jsonl --engine-file a.yaml --engine-file b.yaml
    bench quality --engine-arg weights-dtype=bf16 --against runs/20261203T101500Z-reference-quality
"""

from __future__ import annotations

from pathlib import Path

import typer

from bench.commands import stopping
from bench.commands.console import console, errors, fail
from bench.commands.flags import MeasureFlags


def quality(
    flags: MeasureFlags,
    eval: Path = typer.Option(None, "--eval", help="A JSONL eval: {\"prompt\" or \"messages\", \"answer\", "
                                                   "\"grader\", \"category\"} a line (default: the shipped eval "
                                                   "of the quality scenario)."),
    concurrency: int = typer.Option(1, help="Users asking at once (the answers may change under load)."),
    against: str = typer.Option(None, help="A reference to compare with, answer by answer: a run directory of an "
                                           "earlier `bench quality`, an engine file (.yaml) or an engine kind "
                                           "(asked first). Works without labels: identical answers, and the "
                                           "same first token with --logprobs."),
    logprobs: bool = typer.Option(False, help="Ask for logprobs, so first tokens compare (llama.cpp, vLLM, SGLang "
                                              "and OpenAI return them; the reference engine refuses them)."),
) -> None:
    """Grade each engine's answers to one eval (greedy, every item once): accuracy with its 95 % interval, by
    grader and category, written to quality.json; engines compared item by item (exact McNemar)."""
    stopping.install()
    from bench.commands.display import quality_runs_table
    from bench.flows.quality import QualityError, QualityPlan, run_quality
    from bench.inputs.scenario import ScenarioError
    from engines.endpoint import EndpointError
    from engines.launch import EngineStartError
    from engines.registry import EngineError

    if flags.resume:
        fail("--resume: a quality run is asked again whole (it takes minutes, not hours); drop --resume")
    try:
        outcome = run_quality(flags, QualityPlan(eval, concurrency, against, logprobs))
    except (QualityError, ScenarioError, EndpointError, EngineError, EngineStartError, ValueError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        errors.print("[yellow]interrupted:[/] the answers so far are kept in the run directories")
        raise typer.Exit(stopping.exit_code()) from None
    shown = ([outcome.baseline] if outcome.baseline else []) + outcome.runs
    if shown:
        console.print(quality_runs_table(shown))
    for run in outcome.runs:
        if run.paired is not None and run.paired.num_both:
            console.print(run.paired.sentence(), highlight=False)
        if run.agreement is not None:
            console.print(run.agreement.sentence(), highlight=False)
    for run in shown:
        console.print(f"{run.name}: {run.run_dir / 'quality.json'}", highlight=False)
    for engine, reason in outcome.failures:
        errors.print(f"[bold red]not asked:[/] {engine}: {reason}", highlight=False, markup=True)
    if outcome.failures:
        raise typer.Exit(2 if not shown else 1)
