"""`bench tune`: measure each configuration of one engine in turn, then put them side by side.

    bench tune --engine reference --grid max-num-seqs=8,32 --grid max-num-batched-tokens=512,2048
    bench tune --engine vllm --configs configs.yaml --objective cost
    bench tune --resume runs/tune-20261201T170000Z-reference
    bench tune --engine vllm --grid max-num-seqs=64,256 --cluster 10.0.0.1:6379 --gpus-per-config 1

A thin shell over `bench.flows.tune.run_tune`, which runs each configuration's sweep inside the tune folder and
writes the tune's table, chart and report when the last one ends; this prints what it says and the outcome.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from bench.commands import stopping
from bench.commands.console import console, errors, fail, warn
from bench.commands.flags import MeasureFlags
from bench.commands.helptext import CLUSTER, examples

if TYPE_CHECKING:  # imported where they are used, so that `bench --help` stays light
    from bench.flows.tune import TuneOutcome


EXAMPLES = examples("bench tune --grid max-num-seqs=8,32 --grid max-num-batched-tokens=512,2048",
                    "bench tune --engine vllm --configs configs.yaml --objective cost",
                    "bench tune --resume runs/tune-20261201T170000Z-reference")

# Shared flags a tune has no use for: hidden from its help and refused with the reason
# (bench.commands.flags.measure_command). bench.flows.tune checks the same for callers of run_tune.
_ONE_ENGINE = ("a tune tries the configurations of one engine given by --engine KIND; {} would add engines of "
               "its own")
REFUSES = {
    "report": "bench tune ranks its configurations by each one's run report (report.json), so it always writes "
              "them; drop --no-report",
    "engine_file": _ONE_ENGINE.format("an --engine-file"),
    "through_ui": _ONE_ENGINE.format("--through-ui"),
    "ui_python": _ONE_ENGINE.format("--through-ui (and its --ui-python)"),
}


def tune(
    flags: MeasureFlags,
    grid: list[str] = typer.Option(None, metavar="KEY=V1,V2,...",
                                   help="An engine argument (any --engine-arg key of the launcher, model included) "
                                        "and the values to try; repeatable, every combination is tried."),
    configs: Path = typer.Option(None, metavar="FILE", help="A YAML file: `configs:` a list of mappings of engine "
                                                           "arguments, each a configuration (instead of --grid)."),
    objective: str = typer.Option("capacity", metavar="OBJECTIVE",
                                  help="What `best` means: capacity (users within the SLO), cost (per 1M output "
                                       "tokens), throughput (peak output tokens/s) or latency (TTFT at the lowest "
                                       "load)."),
    concurrency: str | None = typer.Option(None, metavar="N,N,...",
                                           help="Closed-loop levels of each configuration's sweep, e.g. 1,8,32."),
    rate: str | None = typer.Option(None, metavar="N,N,...", help="Open-loop levels in requests/s, e.g. 2,4,8."),
    min_accuracy: float | None = typer.Option(None, min=0, max=1, metavar="FRACTION",
                                              help="With a graded workload (e.g. --scenario quality): a "
                                                   "configuration whose accuracy interval lies below this share "
                                                   "can't be the best."),
    cluster: str | None = typer.Option(None, metavar="ADDRESS", rich_help_panel=CLUSTER,
                                       help="A Ray cluster (auto, HOST:PORT or ray://HOST:PORT): each configuration "
                                            "runs on a node Ray places it on, engine and load together, side by "
                                            "side up to what the cluster holds."),
    gpus_per_config: float | None = typer.Option(None, min=0, metavar="K", rich_help_panel=CLUSTER,
                                                 help="With --cluster: the GPUs each configuration asks of its node "
                                                      "[default: 0; on --resume, as the tune began]."),
    cpus_per_config: float | None = typer.Option(None, min=0, metavar="N", rich_help_panel=CLUSTER,
                                                 help="With --cluster: the CPU cores each configuration asks of its "
                                                      "node, its engine's threads (Ray sets OMP_NUM_THREADS to it) "
                                                      "[default: 1; on --resume, as the tune began]."),
) -> None:
    """Measure each configuration of one engine in turn, and mark the best.

    The default configuration, then each of a grid or a file: capacity under the SLO, throughput and cost for
    each, the best marked, and the Pareto front of per-user speed and throughput."""
    stopping.install()
    from bench.commands.display import RichTuneWatcher
    from bench.flows.tune import TuneAsk, TuneError, run_tune

    try:
        outcome = run_tune(flags, TuneAsk(grid, configs, objective, concurrency, rate, min_accuracy, cluster,
                                          gpus_per_config, cpus_per_config), RichTuneWatcher())
    except (TuneError, ValueError) as exc:
        fail(str(exc))
    if outcome.interrupted:
        from rich.markup import escape

        again = escape(f"bench tune --resume {outcome.plan.folder}" + (f" --cluster {cluster}" if cluster else ""))
        errors.print(f"[yellow]interrupted:[/] go on with {again}", markup=True, highlight=False)
        raise typer.Exit(stopping.exit_code())
    _show(outcome)
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)


def _show(outcome: TuneOutcome) -> None:
    """The table of every configuration, the best and its decision report, the tune report."""
    from bench.commands.tables import tune_table

    plan = outcome.plan
    console.print(tune_table(list(outcome.results), outcome.chosen, outcome.default, plan.objective,
                             plan.min_accuracy))
    if outcome.hardware_note:
        warn(outcome.hardware_note)
    if outcome.chosen is not None and outcome.decision is not None:
        console.print(f"best by {plan.objective}: {outcome.chosen.name} (of {outcome.num_tried} tried); the decision "
                      f"with it: {outcome.decision}", highlight=False, soft_wrap=True)
    console.print(f"tune report: {outcome.report}", highlight=False)
