"""How to add many LoRA adapters' deltas to one step's rows: the candidate kernels side by side.

One step of SmolLM2-135M's shapes (hidden 576, 30 layers, qkv_proj out 576 + 192 + 192) whose rows run 1, 4
or 16 adapters of rank 16 on q_proj and v_proj (so each adapter's qkv delta is A (32, 576), B (960, 32), in
float32 as `core/lora.py` keeps them). Per step it times the 30 layers' qkv deltas, each variant on the same
rows and weights:

- loop: per adapter present, gather its rows, two small matmuls, index_add back (the engine before batching);
- masked: one matmul against every present adapter's A stacked (sum of ranks), each row's product masked to
  its own adapter's columns, one matmul against every B stacked;
- bgmv: per row, its adapter's A and B gathered from slot-stacked tensors (padded to the largest rank), two
  batched products (einsum over A[idx], B[idx]);
- segments: rows sorted by adapter once per step, a matmul pair per adapter on its contiguous slice, one
  index_add back;
- engine: `LoraBatch.add_deltas` as it is now (its step setup, `from_spans` with the runner's stack cache,
  timed with it): the masked form with B stacked transposed up to 64 rows, the sorted segments beyond.

Cases: decode steps of 16 and 32 rows, the adapters taking turns row by row, and a prefill-sized step of 256
rows (a 224-row prompt of the first adapter and 32 decode rows taking turns). Alongside, the one-off costs:
stacking the 30 layers' A and B of a set of adapters (what a cache miss costs) and the per-step index/mask.
It prints the median of `--repeats` (each `--steps` steps), in ms per step. Last, a churn case: 16 decode rows
whose adapters change as requests end and start (uniform over the adapters), timing the loop and the engine
with its stack cache (builds included) over the same steps. Usage:

    python benchmarks/lora_delta_kernel.py [--adapters 1,4,16] [--rows 16,32,256] [--repeats 7] [--steps 5]
        [--churn-steps 256]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from engines.reference.core.lora import LoraAdapter, LoraBatch, ProjectionDelta, StackCache

HIDDEN = 576
NUM_LAYERS = 30
Q_ROWS, KV_ROWS = 576, 192
QKV_ROWS = Q_ROWS + 2 * KV_ROWS
RANK = 16
PROMPT_ROWS = 224  # of the prefill-sized case: one prompt, the rest decode rows
PREFILL_FROM_ROWS = 64  # a case of more rows than this is the prefill-sized one


def random_adapter(name: str, generator: torch.Generator) -> LoraAdapter:
    """Rank 16 on q_proj and v_proj, laid out as `loading/lora.py` lays it out: A's stacked, B's on their rows."""
    layers = []
    for _ in range(NUM_LAYERS):
        a = torch.randn(2 * RANK, HIDDEN, generator=generator) * 0.02
        b = torch.zeros(QKV_ROWS, 2 * RANK)
        b[:Q_ROWS, :RANK] = torch.randn(Q_ROWS, RANK, generator=generator) * 0.02
        b[Q_ROWS + KV_ROWS :, RANK:] = torch.randn(KV_ROWS, RANK, generator=generator) * 0.02
        layers.append({"qkv_proj": ProjectionDelta(a, b)})
    return LoraAdapter(name, RANK, 2.0 * RANK, ("q_proj", "v_proj"), "", tuple(layers))


def row_slots(num_rows: int, num_adapters: int) -> list[int]:
    """Each row's adapter: decode rows take turns; the prefill-sized case starts with one prompt's rows."""
    if num_rows <= PREFILL_FROM_ROWS:
        return [row % num_adapters for row in range(num_rows)]
    return [0] * PROMPT_ROWS + [row % num_adapters for row in range(num_rows - PROMPT_ROWS)]


def spans_of(adapters: list[LoraAdapter], slots: list[int]) -> list[tuple[LoraAdapter | None, int]]:
    """The runner's spans: a prompt is one span of its rows, a decode one span of one row."""
    spans: list[tuple[LoraAdapter | None, int]] = []
    if len(slots) > PREFILL_FROM_ROWS:
        spans.append((adapters[0], PROMPT_ROWS))
        slots = slots[PROMPT_ROWS:]
    return spans + [(adapters[s], 1) for s in slots]


# --- the candidates: each a (setup per set of adapters, setup per step, per layer call) -------------------------


def loop_kernel(adapters: list[LoraAdapter], slots: list[int]) -> Callable[[torch.Tensor, torch.Tensor, int], None]:
    groups = [(a, torch.tensor([r for r, s in enumerate(slots) if s == i])) for i, a in enumerate(adapters)]
    groups = [(a, rows) for a, rows in groups if rows.numel()]

    def call(out: torch.Tensor, x: torch.Tensor, layer: int) -> None:
        for adapter, rows in groups:
            delta = adapter.layers[layer]["qkv_proj"]
            if rows.numel() == out.shape[0]:
                out.add_(delta.product(x))
            else:
                out.index_add_(0, rows, delta.product(x.index_select(0, rows)))

    return call


def stack_concatenated(adapters: list[LoraAdapter]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per layer: A's stacked (sum of ranks, in), B's side by side (out, sum of ranks), each column's slot."""
    stacked = []
    for layer in range(NUM_LAYERS):
        deltas = [a.layers[layer]["qkv_proj"] for a in adapters]
        column_slots = torch.cat([torch.full((d.a.shape[0],), i) for i, d in enumerate(deltas)])
        stacked.append((torch.cat([d.a for d in deltas]), torch.cat([d.b for d in deltas], dim=1), column_slots))
    return stacked


def masked_kernel(
    stacked: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], slots: list[int]
) -> Callable[[torch.Tensor, torch.Tensor, int], None]:
    row_slot = torch.tensor(slots)
    mask = (row_slot[:, None] == stacked[0][2][None, :]).float()  # every layer has the same columns here

    def call(out: torch.Tensor, x: torch.Tensor, layer: int) -> None:
        a, b, _ = stacked[layer]
        out.addmm_((x @ a.t()).mul_(mask), b.t())

    return call


def stack_padded(adapters: list[LoraAdapter]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer: A (slots, rank, in) and B (slots, out, rank), padded to the largest rank (all equal here)."""
    return [
        (torch.stack([a.layers[layer]["qkv_proj"].a for a in adapters]),
         torch.stack([a.layers[layer]["qkv_proj"].b for a in adapters]))
        for layer in range(NUM_LAYERS)
    ]  # fmt: skip


def bgmv_kernel(
    stacked: list[tuple[torch.Tensor, torch.Tensor]], slots: list[int]
) -> Callable[[torch.Tensor, torch.Tensor, int], None]:
    index = torch.tensor(slots)

    def call(out: torch.Tensor, x: torch.Tensor, layer: int) -> None:
        a, b = stacked[layer]
        shrunk = torch.einsum("ti,tri->tr", x, a[index])
        out.add_(torch.einsum("tr,tor->to", shrunk, b[index]))

    return call


def segments_kernel(adapters: list[LoraAdapter], slots: list[int]) -> Callable[[torch.Tensor, torch.Tensor, int], None]:
    order = sorted(range(len(slots)), key=slots.__getitem__)
    permutation = torch.tensor(order)
    bounds: list[tuple[LoraAdapter, int, int]] = []
    for position, row in enumerate(order):
        if bounds and bounds[-1][0] is adapters[slots[row]]:
            bounds[-1] = (bounds[-1][0], bounds[-1][1], position + 1)
        else:
            bounds.append((adapters[slots[row]], position, position + 1))

    def call(out: torch.Tensor, x: torch.Tensor, layer: int) -> None:
        sorted_x = x.index_select(0, permutation)
        products = torch.empty(len(order), out.shape[1])
        for adapter, start, end in bounds:
            delta = adapter.layers[layer]["qkv_proj"]
            torch.mm(sorted_x[start:end] @ delta.a.t(), delta.b.t(), out=products[start:end])
        out.index_add_(0, permutation, products)

    return call


def engine_kernel(
    adapters: list[LoraAdapter], slots: list[int], cache: StackCache
) -> Callable[[torch.Tensor, torch.Tensor, int], None]:
    batch = LoraBatch.from_spans(spans_of(adapters, slots), "cpu", cache)
    assert batch is not None

    def call(out: torch.Tensor, x: torch.Tensor, layer: int) -> None:
        batch.add_deltas(out, x, layer, "qkv_proj")

    return call


# --- timing ----------------------------------------------------------------------------------------------------


def median_ms(runs: dict[str, Callable[[], object]], repeats: int, steps: int) -> dict[str, float]:
    """Per run, the median ms of one call over `repeats` rounds of `steps` calls; the runs take turns round by
    round, so that a neighbour's load on this shared machine falls on all of them alike."""
    for run in runs.values():
        run()  # warm: first-call allocations and kernel choices
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            for _ in range(steps):
                run()
            times[name].append((time.perf_counter() - start) / steps * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def step_runner(
    make: Callable[[], Callable[[torch.Tensor, torch.Tensor, int], None]], x: torch.Tensor, out: torch.Tensor
) -> Callable[[], None]:
    """One step: the kernel's per-step setup, then its call in each of the 30 layers."""

    def run() -> None:
        call = make()
        for layer in range(NUM_LAYERS):
            call(out, x, layer)

    return run


def check_alike(adapters: list[LoraAdapter], slots: list[int], kernels: dict[str, Callable]) -> None:
    """Every variant adds the same deltas as the loop (so the timings compare like with like)."""
    x = torch.randn(len(slots), HIDDEN)
    expected = torch.zeros(len(slots), QKV_ROWS)
    loop_kernel(adapters, slots)(expected, x, NUM_LAYERS - 1)
    for name, make in kernels.items():
        got = torch.zeros(len(slots), QKV_ROWS)
        make()(got, x, NUM_LAYERS - 1)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, msg=f"{name} differs from the loop")


def churn_steps(pool: list[LoraAdapter], num_users: int, num_steps: int, seed: int = 0) -> list[list[int]]:
    """Each decode step's rows' adapters while requests come and go: each of `num_users` users decodes 64 tokens
    per request (so one request in 64 ends each step) and the next one picks an adapter uniformly."""
    generator = torch.Generator().manual_seed(seed)
    users = torch.randint(len(pool), (num_users,), generator=generator).tolist()
    steps = []
    for _ in range(num_steps):
        for user in range(num_users):
            if torch.rand(1, generator=generator).item() < 1 / 64:
                users[user] = int(torch.randint(len(pool), (1,), generator=generator))
        steps.append(list(users))
    return steps


def churn_figures(pool: list[LoraAdapter], num_users: int, num_steps: int) -> tuple[float, float, int, float]:
    """ms per step of the loop and of the engine (its stack builds included) over a run of churning steps, the
    engine's builds, and the mean distinct adapters per step."""
    steps = churn_steps(pool, num_users, num_steps)
    x, out = torch.randn(num_users, HIDDEN), torch.zeros(num_users, QKV_ROWS)

    cache = StackCache()
    makers = {"loop": lambda slots: loop_kernel(pool, slots), "engine": lambda slots: engine_kernel(pool, slots, cache)}
    totals = dict.fromkeys(makers, 0.0)
    for slots in steps:  # the two take turns step by step: a neighbour's load falls on both alike
        for name, make in makers.items():
            start = time.perf_counter()
            call = make(slots)
            for layer in range(NUM_LAYERS):
                call(out, x, layer)
            totals[name] += time.perf_counter() - start
    loop_ms, engine_ms = (totals[name] / num_steps * 1e3 for name in makers)
    return loop_ms, engine_ms, cache.num_builds, statistics.mean(len(set(slots)) for slots in steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapters", default="1,4,16")
    parser.add_argument("--rows", default="16,32,256")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--churn-steps", type=int, default=256, help="steps of the churn case (0: none)")
    args = parser.parse_args()
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    counts = [int(c) for c in args.adapters.split(",")]
    pool = [random_adapter(f"adapter-{i}", generator) for i in range(max(counts))]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; ms per step (30 layers' qkv deltas), "
        f"median of {args.repeats} x {args.steps} steps"
    )
    print(
        f"{'adapters':>8} {'rows':>5} {'loop':>8} {'masked':>8} {'bgmv':>8} {'segments':>9} {'engine':>8}   "
        f"{'stack cat':>9} {'stack pad':>9}"
    )
    for count in counts:
        adapters = pool[:count]
        concatenated, padded = stack_concatenated(adapters), stack_padded(adapters)
        cache = StackCache()  # as the runner keeps one: the engine's steps after the first find their stack
        stackings = {"cat": lambda: stack_concatenated(adapters), "pad": lambda: stack_padded(adapters)}  # noqa: B023
        stack_ms = median_ms(stackings, args.repeats, 1)
        for num_rows in (int(r) for r in args.rows.split(",")):
            slots = row_slots(num_rows, count)
            kernels = {
                "loop": lambda: loop_kernel(adapters, slots),  # noqa: B023
                "masked": lambda: masked_kernel(concatenated, slots),  # noqa: B023
                "bgmv": lambda: bgmv_kernel(padded, slots),  # noqa: B023
                "segments": lambda: segments_kernel(adapters, slots),  # noqa: B023
                "engine": lambda: engine_kernel(adapters, slots, cache),  # noqa: B023
            }
            check_alike(adapters, slots, kernels)
            x, out = torch.randn(num_rows, HIDDEN), torch.zeros(num_rows, QKV_ROWS)
            figures = median_ms(
                {name: step_runner(make, x, out) for name, make in kernels.items()}, args.repeats, args.steps
            )
            print(
                f"{count:>8} {num_rows:>5} {figures['loop']:>8.2f} {figures['masked']:>8.2f} "
                f"{figures['bgmv']:>8.2f} {figures['segments']:>9.2f} {figures['engine']:>8.2f}   "
                f"{stack_ms['cat']:>9.2f} {stack_ms['pad']:>9.2f}",
                flush=True,
            )

    if args.churn_steps:
        users = 16
        loop_ms, engine_ms, builds, distinct = churn_figures(pool, users, args.churn_steps)
        print(
            f"\nchurn: {users} decode rows over {len(pool)} adapters, requests of 64 tokens coming and going "
            f"({distinct:.1f} adapters a step), {args.churn_steps} steps: loop {loop_ms:.2f} ms/step, engine "
            f"{engine_ms:.2f} ms/step with {builds} stack builds"
        )


if __name__ == "__main__":
    main()
