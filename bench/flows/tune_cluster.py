"""A tune's configurations run side by side on a cluster (`bench tune --cluster`): each configuration not yet
complete becomes a `bench.flows.placed.Work`, its state kept in its tune.json entry.

Contract: `run_tune_placed(plan, placer, say, failed)` places every configuration not yet complete (an interrupted
one goes on from its run directory, whose files go with it; any other starts afresh), saves tune.json after every
change, and returns how many configurations did not complete. Ctrl-C is raised after every node has stopped.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.flows.placed import Placer, Work, files_of, for_nodes, run_placed
from bench.flows.tune_plan import Tune

JOB = "tune"  # what the node process is asked to run (bench.commands.on_node)


def run_tune_placed(plan: Tune, placer: Placer, say: Callable[[str], None], failed: Callable[[str, str], None]) -> int:
    """Every configuration not yet complete measured where the placer puts it."""
    works = []
    for entry in plan.entries:
        if entry.status == "complete":
            say(f"{entry.config.name}: complete, not run again")
            continue
        goes_on = entry.status == "interrupted" and bool(entry.run_dir)
        if not goes_on:
            entry.run_dir, entry.status = None, "pending"  # run afresh: an earlier failed run is not its figures
        spec = {"job": JOB, "engine": plan.engine, "objective": plan.objective, "settings": for_nodes(plan.settings),
                "min_accuracy": plan.min_accuracy, "config": {"name": entry.config.name, "args": entry.config.args},
                "run_dir": entry.run_dir, "status": entry.status}
        files = files_of(plan.folder / entry.run_dir) if entry.run_dir else {}
        works.append(Work(entry.config.name, entry, plan.folder, spec, files, entry.node if goes_on else None))
    return run_placed(works, placer, plan.save, say, failed, "bench tune --resume")
