"""Why batching decides throughput: the reference engine with --batching none, static and continuous.

Each mode is launched as its own process and swept with the same workload (prompts of 64 tokens that share
no prefix, 64 output tokens with ignore_eos) at concurrency 1, 8 and 32; then the prefix cache's effect on
time to first token with a shared 1,000-token system prompt (cache on vs off). Prints the figures; the run
directories stay under --out for `bench compare` and `bench report`. Usage:

    python benchmarks/batching.py [--model default] [--duration 30] [--out runs/batching]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.flows.sweep import SweepPlan, run_sweep
from bench.inputs.scenario import Scenario
from engines.engine_file import EngineFile
from engines.registry import make_launcher
from loadgen.types import LevelSummary
from loadgen.workload import LengthDistribution, SharedPrefix, Workload


def sweep(model: str, args: dict[str, str], workload: Workload, levels: list[int], duration_s: float,
          out: Path, name: str) -> list[LevelSummary]:
    scenario = Scenario.model_validate({"name": name, "workload": workload.model_dump(),
                                        "load": {"concurrency": levels, "duration_s": duration_s}})
    launcher = make_launcher(EngineFile(engine="reference", model=model, args=args))
    return run_sweep(SweepPlan(scenario, out, engine_kind="reference"), launcher).summaries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--levels", default="1,8,32")
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--modes", default="none,static,continuous")
    parser.add_argument("--out", type=Path, default=Path("runs/batching"))
    args = parser.parse_args()
    levels = [int(v) for v in args.levels.split(",")]
    plain = Workload(input_tokens=LengthDistribution(value=64), output_tokens=LengthDistribution(value=64))
    throughput: dict[str, dict[str, float]] = {}
    for mode in args.modes.split(","):
        summaries = sweep(args.model, {"batching": mode}, plain, levels, args.duration, args.out, f"batching-{mode}")
        throughput[mode] = {s.level: s.throughput.output_tokens_per_s for s in summaries}
        for s in summaries:
            print(f"batching={mode:10s} {s.level:>4s}  {s.throughput.output_tokens_per_s:8.1f} output tokens/s  "
                  f"TTFT p50 {s.latency.ttft_ms.p50:8.1f} ms  TPOT p50 {s.latency.tpot_ms.p50:7.1f} ms  "
                  f"held {s.throughput.mean_in_flight:5.1f}  failed {s.requests.num_failed}", flush=True)
    if "none" in throughput and "continuous" in throughput:
        for level in throughput["none"]:
            ratio = throughput["continuous"].get(level, 0) / max(throughput["none"][level], 1e-9)
            print(f"continuous / none at {level}: {ratio:.2f}x")
    shared = Workload(input_tokens=LengthDistribution(value=32), output_tokens=LengthDistribution(value=16),
                      shared_prefix=SharedPrefix(groups=1, tokens=1000))
    for cache in ("prefix-cache", "no-prefix-cache"):
        (s,) = sweep(args.model, {cache: "true"}, shared, [1], args.duration, args.out, f"shared-prefix-{cache}")
        ttft = s.latency.ttft_ms
        print(f"shared 1,000-token system prompt, {cache:16s}: TTFT p50 {ttft.p50 or float('nan'):8.1f} ms  "
              f"p90 {ttft.p90 or float('nan'):8.1f} ms  failed {s.requests.num_failed}", flush=True)


if __name__ == "__main__":
    main()
