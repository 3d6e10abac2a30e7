"""`bench tune`: measure each configuration of one engine in turn, then put them side by side.

    bench tune --engine reference --grid max-num-seqs=8,32 --grid max-num-batched-tokens=512,2048
    bench tune --engine vllm --configs configs.yaml --objective cost
    bench tune --resume runs/tune-20261201T170000Z-reference

Each configuration is a sweep of its own (its run directory, its report) inside the tune folder; the
tune's table, chart and report are written when the last one ends (`bench.flows.tune`, `reports.tune_report`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from bench.commands import stopping
from bench.commands.console import console, errors, fail, warn
from bench.commands.flags import MeasureFlags
from bench.commands.helptext import examples
from common.private import make_private_dir

if TYPE_CHECKING:  # imported where they are used, so that `bench --help` stays light
    from bench.flows.tune import ConfigResult, Tune, TuneEntry
    from bench.inputs.options import LoadOverrides


EXAMPLES = examples("bench tune --grid max-num-seqs=8,32 --grid max-num-batched-tokens=512,2048",
                    "bench tune --engine vllm --configs configs.yaml --objective cost",
                    "bench tune --resume runs/tune-20261201T170000Z-reference")


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
) -> None:
    """Measure each configuration of one engine in turn, and mark the best.

    The default configuration, then each of a grid or a file: capacity under the SLO, throughput and cost for
    each, the best marked, and the Pareto front of per-user speed and throughput."""
    stopping.install()
    from bench.flows.tune import Tune, TuneEntry, TuneError, check_objective, parse_grids, read_configs, with_default
    from bench.inputs.options import LoadOverrides
    from bench.run.resume import check_owner

    if not flags.report:  # each configuration's sweep is run with report=False, then reported here all the same
        fail("--no-report: bench tune ranks its configurations by each one's run report (report.json), so it always "
             "writes them; drop --no-report")
    try:
        if flags.resume:
            given = [f for f in flags.given() if f != "--engine"] + (["--grid"] if grid else []) + \
                (["--configs"] if configs else []) + (["--concurrency"] if concurrency else []) + \
                (["--rate"] if rate else [])
            if len(flags.resume) != 1 or given:
                raise TuneError(f"--resume takes one tune folder and keeps the settings it began with; drop "
                                f"{', '.join(given) or 'the other folders'}")
            check_owner(flags.resume[0], "tune.json")  # its configurations are run as they are written
            plan = Tune.load(flags.resume[0])
            if objective not in ("capacity", plan.objective):
                raise TuneError(f"--resume keeps the objective the tune began with ({plan.objective}); drop "
                                f"--objective {objective}")
            flags, concurrency, rate = _settings_back(plan.settings)
        else:
            kinds = flags.engine or ["reference"]
            if len(kinds) != 1:
                raise TuneError(f"--engine {', '.join(kinds)}: a tune tries one engine's configurations; give one")
            if flags.engine_file or flags.through_ui or kinds == ["openwebui"]:
                raise TuneError("a tune tries the configurations of one engine given by --engine KIND; an "
                                "--engine-file, --through-ui or --engine openwebui would add engines of their own")
            if bool(grid) == bool(configs):
                raise TuneError("give --grid KEY=V1,V2 (repeatable) or --configs FILE: the configurations to try")
            tried = parse_grids(grid) if grid else read_configs(configs)
            folder = flags.out / f"tune-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{kinds[0]}"
            make_private_dir(folder)
            plan = Tune(folder, kinds[0], check_objective(objective), [TuneEntry(c) for c in with_default(tried)],
                        _settings(flags, concurrency, rate), min_accuracy)
            plan.save()
    except (TuneError, ValueError) as exc:
        fail(str(exc))
    levels = LoadOverrides(concurrency=concurrency, rate=rate)
    console.print(f"tune {plan.folder}: {len(plan.entries)} configurations of {plan.engine} "
                  f"({', '.join(e.config.name for e in plan.entries)})", highlight=False, soft_wrap=True)
    failures = 0
    for entry in plan.entries:
        if entry.status == "complete":
            console.print(f"{entry.config.name}: complete, not run again", highlight=False)
            if entry.run_dir and not (plan.folder / entry.run_dir / "report.json").is_file():
                _report(entry.config.name, plan.folder / entry.run_dir)  # stopped before its report was written
            continue
        failures += not _measure(plan, entry, flags, levels)
    _finish(plan)
    if failures:
        raise typer.Exit(1)


def _measure(plan: Tune, entry: TuneEntry, flags: MeasureFlags, levels: LoadOverrides) -> bool:
    """One configuration's sweep (resumed if it was interrupted), its report, and its state in tune.json."""
    from bench.commands.display import RichJobWatcher
    from bench.flows import measure

    watch = RichJobWatcher()
    console.rule(f"{entry.config.name}", style="dim")
    before = set(plan.folder.iterdir())
    try:
        if entry.run_dir and entry.status == "interrupted":
            jobs, finished = measure.resumed_jobs(MeasureFlags(resume=[plan.folder / entry.run_dir], out=plan.folder),
                                                  "sweep", [], watch.say)
            if finished:  # it ended before tune.json heard of it
                entry.status = "complete"
                plan.save()
                _report(entry.config.name, plan.folder / entry.run_dir)
                return True
        else:
            entry.run_dir = None  # a configuration run afresh: an earlier failed run is not its figures
            jobs = measure.fresh_jobs(_config_flags(flags, plan, entry.config.args), levels, say=watch.say)
        if len(jobs) != 1:
            raise RuntimeError(f"a tune configuration is one job, not {len(jobs)}")
        outcome = measure.run_jobs(jobs, watch)
    except KeyboardInterrupt:
        entry.run_dir = entry.run_dir or _new_run_dir(plan.folder, before)
        entry.status = "interrupted"
        plan.save()
        errors.print(f"[yellow]interrupted:[/] go on with bench tune --resume {plan.folder}")
        raise typer.Exit(stopping.exit_code()) from None
    except Exception as exc:  # a bad flag or engine argument: this configuration fails, the others go on
        entry.status = f"failed: {exc}"
        plan.save()
        errors.print(f"[bold red]{escape(entry.config.name)} failed:[/] {escape(str(exc))}", highlight=False)
        return False
    result = outcome.results[0] if outcome.results else None
    entry.run_dir = result.run_dir.name if result else entry.run_dir or _new_run_dir(plan.folder, before)
    if outcome.failures:
        entry.status = f"failed: {outcome.failures[0][1]}"
    else:
        entry.status = "complete" if result and result.status == "complete" else f"failed: {result and result.status}"
    plan.save()
    if result is not None:
        _report(entry.config.name, result.run_dir)
    if outcome.failures:
        errors.print(f"[bold red]{escape(entry.config.name)} failed:[/] {escape(outcome.failures[0][1])}",
                     highlight=False)
    return entry.status == "complete"


def _settings(flags: MeasureFlags, concurrency: str | None, rate: str | None) -> dict[str, Any]:
    """What every configuration is measured with, in JSON."""
    values = {f.name: getattr(flags, f.name) for f in dataclasses.fields(flags) if f.name not in ("resume", "out")}
    as_text = {k: [str(p) for p in v] if isinstance(v, list) and v and isinstance(v[0], Path)
               else str(v) if isinstance(v, Path) else v for k, v in values.items()}
    return {"flags": as_text, "out": str(flags.out), "concurrency": concurrency, "rate": rate}


def _settings_back(settings: dict[str, Any]) -> tuple[MeasureFlags, str | None, str | None]:
    """`_settings`' JSON back into the flags it was made from."""
    values = dict(settings.get("flags", {}))
    for name in ("tokenizer", "dataset"):
        values[name] = Path(values[name]) if values.get(name) else None
    values["engine_file"] = [Path(p) for p in values["engine_file"]] if values.get("engine_file") else None
    return (MeasureFlags(**values, out=Path(settings.get("out", "runs"))), settings.get("concurrency"),
            settings.get("rate"))


def _report(name: str, run_dir: Path) -> None:
    """The configuration's run report, which the tune reads its figures from."""
    from bench.flows.report import render_run_report

    try:
        render_run_report(run_dir)
    except Exception as exc:  # the measurements are kept; the tune says the figures are missing
        warn(f"{name}: no report ({exc})")


def _config_flags(flags: MeasureFlags, plan: Tune, args: dict[str, str]) -> MeasureFlags:
    """The tune's flags with this configuration's engine arguments (`model` is the model flag)."""
    engine_args = [*(flags.engine_arg or []), *(f"{k}={v}" for k, v in args.items() if k != "model")]
    return dataclasses.replace(flags, engine=[plan.engine], engine_arg=engine_args,
                               model=args.get("model", flags.model), out=plan.folder, report=False)


def _new_run_dir(folder: Path, before: set[Path]) -> str | None:
    made = sorted(p for p in set(folder.iterdir()) - before if p.is_dir() and not p.name.startswith("."))
    return made[-1].name if made else None


def _finish(plan: Tune) -> None:
    """The table, the chart and the tune report, from every configuration measured so far."""
    from bench.commands.display import tune_table
    from bench.flows.tune import accuracy_note, best, config_result, pareto_front
    from reports.tune_report import write_tune_report

    results = [config_result(plan.folder, e) for e in plan.entries]
    chosen = best(results, plan.objective, plan.min_accuracy)
    default = next((r for r in results if r.name == "default"), None)
    points = [(r.name, x, y) for r in results for x, y in r.curve]
    front = pareto_front(points)
    console.print(tune_table(results, chosen, default, plan.objective, plan.min_accuracy))
    verdict = _verdict(plan.folder, chosen)
    num_tried = sum(r.run_dir is not None for r in results)
    data = {"engine": plan.engine, "objective": plan.objective, "folder": str(plan.folder),
            "configs": [{**dataclasses.asdict(r), "accuracy_note": accuracy_note(r, default, plan.min_accuracy)}
                        for r in results], "best": chosen.name if chosen else None, "min_accuracy": plan.min_accuracy,
            "num_tried": num_tried,
            "pareto_front": [{"config": name, "tokens_per_s_per_user": x, "tokens_per_s_per_gpu": y}
                             for name, x, y in front], "verdict": verdict}
    files = write_tune_report(data, plan.folder / "tune.html")
    if chosen is not None and chosen.run_dir is not None:
        decision = _decision_report(plan, chosen, chosen.run_dir, num_tried, default)
        console.print(f"best by {plan.objective}: {chosen.name} (of {num_tried} tried); the decision with "
                      f"it: {decision}", highlight=False, soft_wrap=True)
    console.print(f"tune report: {files}", highlight=False)


def _decision_report(plan: Tune, chosen: ConfigResult, run_dir: str, num_tried: int,
                     default: ConfigResult | None) -> Path | str:
    """The decision report of the best configuration (its run in `run_dir`), in the tune folder, saying how it
    was chosen."""
    from bench.flows.report import render_report
    from bench.flows.tune import objective_figure

    mine = objective_figure(chosen, plan.objective)
    theirs = objective_figure(default, plan.objective) if default is not None else None
    against = f"; its {plan.objective} is x{mine / theirs:.2f} the default's" if mine and theirs else ""
    note = (f"measured with the configuration bench tune chose: {chosen.name}, the best by {plan.objective} of "
            f"{num_tried} tried{against} (see tune.html)")
    try:
        return render_report([plan.folder / run_dir], plan.folder / "report.html", notes=[note]).files.html
    except Exception as exc:  # the tune's own report stands without it
        return f"not written ({exc})"


def _verdict(folder: Path, chosen: ConfigResult | None) -> dict[str, Any] | None:
    """The decision of the best configuration's own report."""
    if chosen is None or chosen.run_dir is None:
        return None
    path = folder / chosen.run_dir / "report.json"
    return json.loads(path.read_text())["verdict"] if path.is_file() else None
