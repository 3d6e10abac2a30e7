"""`bench quality`: ask each engine the same eval, greedy, and compare the answers.

    bench quality                                         # the shipped eval on the reference engine
    bench quality --eval my_eval.jsonl --engine-file a.yaml --engine-file b.yaml
    bench quality --engine-arg weights-dtype=bf16 --against runs/20261203T101500Z-reference-quality
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from bench.commands import stopping
from bench.commands.console import console, errors, fail
from bench.commands.flags import MeasureFlags
from bench.commands.helptext import examples

EXAMPLES = examples("bench quality",
                    "bench quality --eval my_eval.jsonl --engine-file a.yaml --engine-file b.yaml",
                    "bench quality --engine-arg weights-dtype=int8 --against runs/RUN_DIR")

# Shared measuring flags a quality run sets itself (bench.flows.quality.asked_once) or has no use for: hidden
# from its help and refused with the reason (bench.commands.flags.measure_command), never taken and then
# overwritten.
_ONCE = "bench quality grades every item of the eval once"
REFUSES = {
    "duration": f"{_ONCE}; it takes no duration",
    "requests": f"{_ONCE}; it sends one request per item, no other count",
    "warmup": f"{_ONCE} and sends no warm-up",
    "repeats": f"{_ONCE}, greedy; run bench quality again (--against the first run) to compare",
    "resume": "a quality run is asked again whole (it takes minutes, not hours); drop --resume",
    "adapter_counts": f"{_ONCE} at one adapter mix; use bench sweep --adapter-counts",
    "workload": f"{_ONCE}, item by item, not as agent sessions",
    "sessions": f"{_ONCE}, item by item, not as agent sessions",
    "max_think_s": f"{_ONCE}, item by item, not as agent sessions",
    "time_scale": f"{_ONCE}; an eval is not a trace",
    "trace_window": f"{_ONCE}; an eval is not a trace",
}

def quality(
    flags: MeasureFlags,
    eval: Path = typer.Option(None, "--eval", help="A JSONL eval: {\"prompt\" or \"messages\", \"answer\", "
                                                   "\"grader\", \"category\"} a line (default: the shipped eval "
                                                   "of the quality scenario).", metavar="FILE"),
    concurrency: int = typer.Option(1, help="Users asking at once (the answers may change under load).", metavar="N"),
    against: str = typer.Option(None, help="A reference to compare with, answer by answer: a run directory of an "
                                           "earlier `bench quality`, an engine file (.yaml) or an engine kind "
                                           "(asked first). Works without labels: identical answers, and the "
                                           "same first token with --logprobs.", metavar="RUN_DIR|FILE|KIND"),
    logprobs: bool = typer.Option(False, help="Ask for logprobs, so first tokens compare (llama.cpp, vLLM, SGLang "
                                              "and OpenAI return them; the reference engine refuses them)."),
    lm_eval: str = typer.Option(None, "--lm-eval", help="Run lm-evaluation-harness TASK(s) (comma-separated, "
                                                        "generation tasks) against each engine instead "
                                                        "($BENCH_LMEVAL: its own environment).",
                                metavar="TASK,TASK,..."),
    lm_eval_include: Path = typer.Option(None, help="A folder of lm-eval task YAMLs (e.g. a task over a local "
                                                    "JSONL file), passed as its --include_path.", metavar="DIR"),
    lm_eval_limit: int = typer.Option(None, min=1, metavar="N",
                                      help="lm-eval: only the first N documents of each task."),
) -> None:
    """Grade each engine's answers to one eval, and compare the engines answer by answer.

    Greedy, every item once: accuracy with its 95 % interval, by grader and category, written to quality.json;
    engines compared item by item (exact McNemar)."""
    stopping.install()
    from bench.commands.display import RichJobWatcher
    from bench.commands.tables import quality_runs_table
    from bench.flows.quality import QualityError, QualityPlan, run_quality
    from bench.inputs.scenario import ScenarioError
    from engines.endpoint import EndpointError
    from engines.launch import EngineStartError
    from engines.registry import EngineError

    if lm_eval is not None:
        _lm_eval(flags, lm_eval, lm_eval_include, lm_eval_limit, concurrency)
        return
    try:
        outcome = run_quality(flags, QualityPlan(eval, concurrency, against, logprobs), RichJobWatcher())
    except (QualityError, ScenarioError, EndpointError, EngineError, EngineStartError, ValueError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        errors.print("[yellow]interrupted:[/] the answers so far are kept in the run directories")
        raise typer.Exit(stopping.exit_code()) from None
    shown = ([outcome.baseline] if outcome.baseline else []) + outcome.runs
    if shown:
        console.print(quality_runs_table([(run.name, run.scores) for run in shown]))
    for run in outcome.runs:
        if run.paired is not None and run.paired.num_both:
            console.print(run.paired.sentence(), highlight=False, markup=False)
        if run.agreement is not None:
            console.print(run.agreement.sentence(), highlight=False, markup=False)
    for run in shown:
        console.print(f"{run.name}: {run.run_dir / 'quality.json'}", highlight=False, markup=False)
    for engine, reason in outcome.failures:
        errors.print(f"[bold red]not asked:[/] {escape(engine)}: {escape(reason)}", highlight=False, markup=True)
    if outcome.failures:
        raise typer.Exit(2 if not shown else 1)


def _lm_eval(flags: MeasureFlags, task: str, include: Path | None, limit: int | None, concurrency: int) -> None:
    """lm-eval against each engine; its scores printed, and written to each run's quality.json."""
    from bench.commands.display import RichJobWatcher
    from bench.commands.tables import DataTable
    from bench.flows.lm_eval import LmEvalError, LmEvalPlan, find_lm_eval, run_lm_eval
    from engines.endpoint import EndpointError
    from engines.launch import EngineStartError
    from engines.registry import EngineError

    if include is not None and not include.is_dir():
        fail(f"--lm-eval-include {include}: no such folder (a folder of lm-eval task YAMLs)")
    try:
        python = find_lm_eval()
        runs, failures = run_lm_eval(flags, LmEvalPlan(task, include, concurrency, limit), python,
                                     RichJobWatcher().say)
    except (LmEvalError, EndpointError, EngineError, EngineStartError, ValueError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(stopping.exit_code()) from None
    table = DataTable(title=f"lm-eval: {task}")
    for name in ("engine", "task", "metric", "value", "stderr", "documents"):
        table.add_column(name, justify="left" if name in ("engine", "task", "metric") else "right")
    for run in runs:
        for name, scores in run.scores.items():
            for metric, value in scores.items():
                if metric == "n" or metric.endswith("_stderr"):
                    continue
                stderr = scores.get(f"{metric}_stderr")
                table.add_row(run.name, name, metric, f"{value:.4g}",
                              f"{stderr:.3g}" if isinstance(stderr, int | float) else "-", str(scores.get("n") or "-"))
    console.print(table)
    for run in runs:
        console.print(f"{run.name}: {run.run_dir / 'quality.json'}", highlight=False, markup=False)
    for engine, reason in failures:
        errors.print(f"[bold red]not evaluated:[/] {escape(engine)}: {escape(reason)}", highlight=False, markup=True)
    if failures:
        raise typer.Exit(2 if not runs else 1)
