"""Steps sized by time against steps sized by tokens alone: the README's main command on the reference engine,
each configuration in turn within every round, so that they are measured side by side on the same machine; the
order turns round every other round (A B, B A, ...), since this machine's speed drifts within minutes and whatever
runs first would otherwise carry the drift alone.

Each configuration is a set of the reference engine's flags (`--engine-arg KEY=VALUE`); the default compares
`--max-step-ms 0` (the token budget alone, as before) with the engine's defaults (a 100 ms step target). Every
run is `bench sweep --concurrency 1,8,32` as a user types it; the figures are medians over the rounds. Beside the
client's output tokens/s it prints the server's own (tokens generated within the level, from its /metrics), which
a level's end does not cut in the middle of a wave of answers, the server's mean running requests (how full its
decode batch was), the level's steady window, and the output tokens/s that reached the client within the level's
duration from its first request ("tok/s dur"). The level's own rate counts its steady window, from the moment every
user was active to the first user's last answer; with answers of one length the users' waves decide where that
ends (a policy that lets every user in at once keeps them in step, and its window takes in a second wave), so the
two configurations' rates may cover different spans. Over the level's duration the span is the same for both, all
of it under the level's full load. Each figure is then a ratio to the first configuration's, the median of the
rounds' ratios. A configuration may run another checkout's code (`--tree NAME=PATH`, e.g. a `git worktree` of
the commit before a change), so that old and new are measured side by side. Usage:

    python benchmarks/step_budget.py [--rounds 3] [--concurrency 1,8,32] [--duration 30]
        [--config tokens=max-step-ms=0 --config time=] [--tree tokens=/tmp/old-checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.inputs.hardware import cpu_model
from bench.run.rundir import REQUESTS_FILE, level_spans, read_level_runs, telemetry_samples
from loadgen.recorder import read_records
from loadgen.telemetry import server_view
from loadgen.types import RequestRecord

BENCH = [sys.executable, "-m", "bench"]
FIGURES = (("out tok/s", "output_tokens_per_s", None), ("srv tok/s", "server_tokens_per_s", None),
           ("TTFT p50", "ttft_ms", "p50"), ("TTFT p99", "ttft_ms", "p99"),
           ("ITL p50", "itl_ms", "p50"), ("ITL p99", "itl_ms", "p99"), ("running", "server_running", None),
           ("window s", "window_s", None), ("tok/s dur", "duration_tokens_per_s", None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--duration", type=float, default=None, help="seconds per level (default: the scenario's)")
    parser.add_argument("--config", action="append", default=None, metavar="NAME=KEY=VALUE,KEY=VALUE",
                        help="a configuration: its name, then engine arguments (none: the engine's defaults)")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="run configuration NAME with the code of the checkout at PATH (default: this one)")
    args = parser.parse_args()
    configs = dict(parse_config(text) for text in (args.config or ["tokens=max-step-ms=0", "time="]))
    trees = {}
    for text in args.tree:
        name, _, path = text.partition("=")
        if name not in configs or not (Path(path) / "engines" / "reference").is_dir():
            parser.error(f"--tree {text!r}: needs NAME=PATH, NAME one of --config's ({', '.join(configs)}) and PATH "
                         f"a checkout of this project")
        trees[name] = Path(path).resolve()
    rows: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            order = list(configs.items())
            for name, engine_args in order[::-1] if round_index % 2 else order:
                for row in _sweep(Path(tmp) / f"{name}-{round_index}", engine_args, args, trees.get(name)):
                    row["round"] = round_index
                    rows.setdefault((name, row["level"]), []).append(row)
    _print(rows, configs, args)


def parse_config(text: str) -> tuple[str, list[str]]:
    name, _, engine_args = text.partition("=")
    return name, [a for a in engine_args.split(",") if a]


def _sweep(out: Path, engine_args: list[str], args: argparse.Namespace, tree: Path | None) -> list[dict]:
    command = [*BENCH, "sweep", "--concurrency", args.concurrency, "--no-report", "--out", str(out)]
    command += [f"--engine-arg={a}" for a in engine_args]
    command += ["--duration", str(args.duration)] if args.duration else []
    print("$", " ".join(command[2:]), f"(in {tree})" if tree else "", flush=True)
    # another checkout's code: found first from its own directory, by the engine's process too (it inherits both)
    env = {**os.environ, "PYTHONPATH": str(tree)} if tree else None
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=tree, env=env)
    (run_dir,) = [p for p in out.iterdir() if (p / "summary.json").is_file()]
    rows = json.loads((run_dir / "summary.json").read_text())
    samples = telemetry_samples(run_dir)
    records = read_records(run_dir / REQUESTS_FILE)
    level_runs, spans = read_level_runs(run_dir), level_spans(run_dir)
    for row in rows:
        duration_s = level_runs[row["level"]]["duration_s"]
        row["duration_tokens_per_s"] = duration_tokens_per_s(records, row["level"], duration_s)
        start, end = spans[row["level"]]
        view = server_view(row["level"], samples, start, end)
        generated = view.generated_tokens
        row["server_tokens_per_s"] = generated / (end - start) if generated is not None else float("nan")
        row["server_running"] = view.mean_running if view.mean_running is not None else float("nan")
    return rows


def duration_tokens_per_s(records: list[RequestRecord], level: str, duration_s: float) -> float:
    """Output tokens that reached the client within the level's first `duration_s` seconds (from its first measured
    request), a second: the same span for every configuration, all of it under the level's full load."""
    measured = [r for r in records if r.level == level and not r.is_warmup]
    start = min(r.send_s for r in measured)
    tokens = sum(count for r in measured for t, count in zip(r.chunk_times_s, r.chunk_tokens, strict=True)
                 if r.send_s + t <= start + duration_s)
    return tokens / duration_s


def _figure(row: dict, key: str, stat: str | None) -> float:
    return float(row[key][stat] if stat else row[key])


def _print(rows: dict[tuple[str, str], list[dict]], configs: dict[str, list[str]], args: argparse.Namespace) -> None:
    print(f"\nreference engine, default model, chat scenario, {platform.processor() or platform.machine()} "
          f"({cpu_model()}); medians of {args.rounds} rounds")
    print(f"{'config':>8} {'level':>6} " + " ".join(f"{label:>10}" for label, _, _ in FIGURES)
          + f" {'p99/p50':>8} {'x out':>6} {'x srv':>6} {'x dur':>6}")
    first = next(iter(configs))
    levels = sorted({level for _, level in rows}, key=lambda level: int(level.lstrip("c")))
    for level in levels:
        for name in configs:
            found = rows.get((name, level), [])
            if not found:
                continue
            medians = [statistics.median(_figure(r, key, stat) for r in found) for _, key, stat in FIGURES]
            ratio = statistics.median(_figure(r, "itl_ms", "p99") / _figure(r, "itl_ms", "p50") for r in found)
            versus = [_versus(found, rows.get((first, level), []), key)
                      for key in ("output_tokens_per_s", "server_tokens_per_s", "duration_tokens_per_s")]
            print(f"{name:>8} {level:>6} " + " ".join(f"{m:>10,.1f}" for m in medians) + f" {ratio:>8.2f} "
                  + " ".join(f"{v:>6.2f}" for v in versus))


def _versus(rows: list[dict], baseline: list[dict], key: str) -> float:
    """The median over rounds of this configuration's figure over the first's in the same round."""
    by_round = {r["round"]: _figure(r, key, None) for r in baseline}
    ratios = [_figure(r, key, None) / by_round[r["round"]] for r in rows if by_round.get(r["round"])]
    return statistics.median(ratios) if ratios else float("nan")


if __name__ == "__main__":
    main()
