"""The `bench` command line: the typer app and its commands, registered in the order a user works. Each
command is a thin shell in a module of its own (bench/commands/*_cmd.py) over a library function, printing with
rich.

Imports stay light (no torch): `bench --help` must answer at once.
"""

from __future__ import annotations

import sys

from bench.commands import (
    doctor_cmd,
    engines_cmd,
    history_cmd,
    import_cmd,
    lora_cmd,
    measure_cmd,
    plan_cmd,
    quality_cmd,
    report_cmd,
    runs_cmd,
    serve_cmd,
    tune_cmd,
)
from bench.commands.flags import measure_command
from bench.commands.helptext import BenchTyper, examples

app = BenchTyper(add_completion=False, no_args_is_help=True,
                 help="Measure LLM inference engines on your hardware; decide whether to self-host.",
                 epilog=examples("bench sweep --concurrency 1,8,32", "bench report runs/RUN_DIR --gpu h100-sxm",
                                 "bench cost --throughput 2400 --gpu h100-sxm --provider llama-3.1-8b"))

# Registered in the order a user works: measure, decide, look at the results, then tools (their panels and
# order in `bench --help`: helptext.COMMAND_PANELS).
app.command("sweep", epilog=measure_cmd.SWEEP_EXAMPLES)(measure_command(measure_cmd.sweep))
app.command("capacity", epilog=measure_cmd.CAPACITY_EXAMPLES)(
    measure_command(measure_cmd.capacity, refuses=measure_cmd.CAPACITY_REFUSES))
app.command("tune", epilog=tune_cmd.EXAMPLES)(measure_command(tune_cmd.tune, refuses=tune_cmd.REFUSES))
app.command("quality", epilog=quality_cmd.EXAMPLES)(measure_command(quality_cmd.quality, refuses=quality_cmd.REFUSES))
app.command("report", epilog=report_cmd.REPORT_EXAMPLES)(report_cmd.report)
app.command("cost", cls=report_cmd.CostHelpCommand, epilog=report_cmd.COST_EXAMPLES)(report_cmd.cost)
app.command("plan", epilog=plan_cmd.EXAMPLES)(plan_cmd.plan)
app.command("compare", epilog=runs_cmd.COMPARE_EXAMPLES)(runs_cmd.compare)
app.command("summarize", epilog=runs_cmd.SUMMARIZE_EXAMPLES)(runs_cmd.summarize)
app.command("import", epilog=import_cmd.IMPORT_EXAMPLES)(import_cmd.import_)
app.command("export", epilog=import_cmd.EXPORT_EXAMPLES)(import_cmd.export)
app.command("history", epilog=history_cmd.EXAMPLES)(history_cmd.history)
app.command("serve", add_help_option=False,
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(serve_cmd.serve)
app.command("engines", epilog=engines_cmd.ENGINES_EXAMPLES)(engines_cmd.engines)
app.add_typer(lora_cmd.app, name="lora")
app.command("clean", epilog=engines_cmd.CLEAN_EXAMPLES)(engines_cmd.clean)
app.command("doctor", rich_help_panel="Serve and tools", epilog=doctor_cmd.EXAMPLES)(doctor_cmd.doctor)


def main() -> None:  # pragma: no cover - the console script calls `app`
    app()
    sys.exit(0)
