"""Steps sized by time against tokens alone, in the steady state: neither the first wave nor a drain.

A closed-loop level of 30 s at 32 users holds about one and a half request cycles of the chat scenario (a
request decodes 128 tokens at some 120 ms a step), and all 32 users start together: the level's output tokens/s
then depends on where each policy puts the first wave's prompts within it. A fixed amount of work has the
opposite fault: users that drift apart finish apart, and its drain runs with few. So here --users users each
send requests of the chat scenario's lengths (drawn by its own length distributions; random token ids,
ignore_eos) one after the other to the `LLMEngine` itself, built as the server builds it, and the
figures are taken over --window seconds from the moment every user's first request was answered. Beside the
output tokens/s: the inter-token gap as every decode row of a step waits for that step (p50, p99), the mean
decode rows and prompt tokens a step held, and the number of steps.

The configurations take turns, their order turning round every other round (A B, B A, ...), each on its own
engine loaded once; every round draws the same prompts for each. It prints the medians over the rounds and each
configuration's tokens/s as a ratio to the first's (the median of the rounds' ratios). Usage:

    python benchmarks/step_budget_work.py [--rounds 3] [--users 32] [--window 60]
        [--config tokens=max-step-ms=0 --config time=]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import numpy as np

from bench.inputs.hardware import cpu_model
from bench.inputs.scenario import load_scenario
from benchmarks.step_budget import parse_config
from engines.reference.core.engine import LLMEngine
from engines.reference.core.sampling import SamplingParams
from engines.reference.serving.options import parse_args
from engines.reference.serving.server import build_engine


@dataclass(frozen=True)
class WorkResult:
    tokens_per_s: float
    gap_p50_ms: float
    gap_p99_ms: float
    mean_decode_rows: float
    mean_prefill_tokens: float
    num_steps: int


def run_work(engine: LLMEngine, users: int, window_s: float, seed: int) -> WorkResult:
    """Every user sends its next request as soon as its last one is answered; measured over `window_s` from the
    moment every user's first request was answered (so the window holds neither the first wave nor a drain)."""
    workload = load_scenario("chat").workload
    rng = np.random.default_rng(seed)
    owner: dict[str, int] = {}
    answered: set[int] = set()

    def send(user: int) -> None:
        request_id = f"{seed}-{len(owner)}"
        owner[request_id] = user
        (prompt_tokens,), (output_tokens,) = workload.input_tokens.sample(rng, 1), workload.output_tokens.sample(rng, 1)
        params = SamplingParams(max_tokens=int(output_tokens), ignore_eos=True, temperature=0.0)
        engine.add_request(request_id, rng.integers(100, engine.vocab_size, int(prompt_tokens)).tolist(), params)

    for user in range(users):
        send(user)
    steps: list[tuple[float, int, int]] = []  # (seconds, decode rows, prefill tokens) of the window's steps
    num_tokens = 0
    window_start: float | None = None
    while window_start is None or time.perf_counter() < window_start + window_s:
        step_started = time.perf_counter()
        outputs = engine.step()
        step_s = time.perf_counter() - step_started
        if window_start is not None and (shape := engine.stats().last_step_shape) is not None:
            steps.append((step_s, shape.num_decode_rows, shape.num_prefill_tokens))
            num_tokens += sum(len(output.new_token_ids) for output in outputs)
        for output in outputs:
            if output.finish_reason is not None:
                answered.add(owner[output.request_id])
                send(owner[output.request_id])
        if window_start is None and len(answered) == users:
            window_start = time.perf_counter()
    elapsed = time.perf_counter() - window_start
    for request_id in owner:
        engine.abort(request_id)
    seconds, decodes, prefills = (np.array(column, dtype=float) for column in zip(*steps, strict=True))
    gaps_ms = np.repeat(seconds, decodes.astype(int)) * 1000  # every decode row waits for its whole step
    return WorkResult(num_tokens / elapsed, float(np.median(gaps_ms)), float(np.quantile(gaps_ms, 0.99)),
                      float(decodes.mean()), float(prefills.mean()), len(steps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--users", type=int, default=32)
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured (default 60)")
    parser.add_argument("--config", action="append", default=None, metavar="NAME=KEY=VALUE,KEY=VALUE",
                        help="a configuration: its name, then the engine's flags (none: the engine's defaults)")
    args = parser.parse_args()
    configs = dict(parse_config(text) for text in (args.config or ["tokens=max-step-ms=0", "time="]))
    engines = {name: build_engine(parse_args([part for arg in engine_args for part in f"--{arg}".split("=", 1)]))
               for name, engine_args in configs.items()}
    for engine in engines.values():
        engine.warm_up()
    results: dict[str, list[WorkResult]] = {name: [] for name in configs}
    for round_index in range(args.rounds):
        order = list(configs)
        for name in order[::-1] if round_index % 2 else order:
            result = run_work(engines[name], args.users, args.window, seed=round_index)
            results[name].append(result)
            print(f"round {round_index} {name}: {result.tokens_per_s:.1f} tok/s, {result.num_steps} steps", flush=True)
    _print(results, args)


def _print(results: dict[str, list[WorkResult]], args: argparse.Namespace) -> None:
    print(f"\nreference engine, default model, {args.users} users of the chat scenario, {args.window:g} s windows, "
          f"{cpu_model()}; medians of {args.rounds} rounds")
    print(f"{'config':>8} {'tok/s':>8} {'x first':>8} {'gap p50':>8} {'gap p99':>8} {'p99/p50':>8} "
          f"{'decodes':>8} {'prompt':>8} {'steps':>6}")
    first = results[next(iter(results))]
    for name, found in results.items():
        def median(key: str, rows: list[WorkResult] = found) -> float:
            return statistics.median(getattr(r, key) for r in rows)

        versus = statistics.median(r.tokens_per_s / b.tokens_per_s for r, b in zip(found, first, strict=True))
        ratio = statistics.median(r.gap_p99_ms / r.gap_p50_ms for r in found)
        print(f"{name:>8} {median('tokens_per_s'):>8.1f} {versus:>8.2f} {median('gap_p50_ms'):>8.1f} "
              f"{median('gap_p99_ms'):>8.1f} {ratio:>8.2f} {median('mean_decode_rows'):>8.1f} "
              f"{median('mean_prefill_tokens'):>8.1f} {median('num_steps'):>6.0f}")


if __name__ == "__main__":
    main()
