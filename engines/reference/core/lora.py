"""LoRA adapters on the decoder's projections: y = x W^T + scaling * (x A^T) B^T, per row of a batch.

Contract: a `LoraAdapter` holds, per layer and per fused projection (`qkv_proj`, `o_proj`, `gate_up_proj`,
`down_proj`), one `ProjectionDelta`: the A matrices of the Hugging Face targets it covers stacked ([A_q; A_v]
for q_proj and v_proj), and a B whose blocks put each target's product on its own rows of the fused output,
zero elsewhere, scaling already multiplied in. So one projection of one adapter is two matmuls, whatever it
targets.

A step's adapters run together (the punica / S-LoRA shape): `StackedDeltas` holds, per layer and projection, the
A matrices of a set of adapters stacked (sum of their ranks, no padding needed) and their B matrices likewise
(transposed), each rank column tagged with its adapter's slot. A `LoraBatch` gives each row of a step's flat
batch its slot (-1: no adapter) and `add_deltas` adds the deltas in one of two ways, whichever measured faster
(`benchmarks/lora_delta_kernel.py`):

- few rows (decode): one matmul of every row against every slot's A, masked to each row's own slot's columns,
  then one matmul against every B: two matmuls per projection whatever the number of adapters;
- many rows (prefill): rows sorted by slot once per step, a matmul pair per adapter on its contiguous slice,
  added back in one index_add (the masked form would multiply each row by every adapter's A and B).

Rows without an adapter are left as the base computed them. A `StackCache` keeps the stacks between steps
(building them copies every adapter's weights): a step reuses a cached stack of a superset of its adapters
when that at most doubles the columns it multiplies by. The base weights stay as they are kept (dense, int8 or
int4): the delta is added to their output.

This module knows nothing of files (`loading/lora.py` reads the PEFT layout) or of scheduling.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

# Hugging Face's projection names, in the order their rows lie in our fused projections
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# Up to this many rows a step runs the masked product over every slot; beyond it, a product pair per adapter on
# its sorted rows (at 256 rows of 16 adapters the masked form took 2.2x as long; at 32 rows it took half as
# long as the per-adapter pairs: `benchmarks/lora_delta_kernel.py`)
MASKED_MAX_ROWS = 64

# A cached stack serves a step whose adapters are a subset of its own holding at most this many times the step's
# columns (the masked product's cost is in proportion to them)
MAX_STACK_WASTE = 2.0

# Stacks kept: each holds a float32 copy of its adapters' weights (16 adapters of rank 16 on q_proj and v_proj of
# SmolLM2-135M: 94 MB)
MAX_CACHED_STACKS = 3


@dataclass(frozen=True)
class ProjectionDelta:
    """One adapter's low-rank update of one fused projection of one layer.

    a: (sum of the targets' ranks, in) float32, the targets' A matrices stacked.
    b: (out, sum of ranks) float32, each target's B (times scaling) on its rows of the fused output, zeros
        elsewhere.

    In float32 whatever the model's dtype: a bfloat16 delta, rounded after each of its two products and again
    when added, put a bfloat16 model's logits 2.3x as far from exact as merging the adapter does; in float32 the
    two are alike (`tests/engines/reference/test_lora.py`). The matrices are small, so this costs little.
    """

    a: torch.Tensor
    b: torch.Tensor

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """(rows, in) -> (rows, out), float32: this adapter's addition to the projection's output."""
        return (x.to(self.a.dtype) @ self.a.t()) @ self.b.t()


@dataclass(frozen=True)
class LoraAdapter:
    """A loaded adapter: its name, rank, targets and, per layer, the deltas of the projections it changes."""

    name: str
    rank: int
    alpha: float
    targets: tuple[str, ...]
    path: str
    layers: tuple[dict[str, ProjectionDelta], ...]  # per layer: fused projection name -> delta (scaling folded in)


@dataclass(frozen=True)
class StackedProjection:
    """Several adapters' deltas of one projection of one layer, for one matmul pair over all of them.

    a: (sum of the ranks, in) float32, the adapters' A matrices stacked in slot order.
    b_t: (sum of the ranks, out) float32, their B matrices transposed and stacked in the same order (so laid
        out, the second product took a fifth less time than against B side by side at 16 rows of 16 adapters).
    layout: index of the column-to-slot map in `StackedDeltas.column_slots` (layers mostly share one).
    """

    a: torch.Tensor
    b_t: torch.Tensor
    layout: int


@dataclass(frozen=True)
class StackedDeltas:
    """The deltas of a set of adapters, stacked per layer and projection; slot i is adapters[i]."""

    adapters: tuple[LoraAdapter, ...]
    layers: tuple[dict[str, StackedProjection], ...]  # per layer: projection -> stack (absent: no adapter has it)
    layouts: tuple[tuple[tuple[int, int], ...], ...]  # distinct layouts: the (slot, rank) of each member, in order
    column_slots: tuple[torch.Tensor, ...]  # per layout: (sum of the ranks,) long, each column's slot

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(adapter.name for adapter in self.adapters)

    @classmethod
    def build(cls, adapters: Iterable[LoraAdapter]) -> StackedDeltas:
        """Copies every adapter's A and B into the stacks (the costly part: done once per cached set)."""
        adapters = tuple(adapters)
        layouts: dict[tuple[tuple[int, int], ...], int] = {}
        layers = []
        for index in range(len(adapters[0].layers)):
            projections = dict.fromkeys(p for adapter in adapters for p in adapter.layers[index])
            stacked = {}
            for projection in projections:
                members = [(slot, adapter.layers[index][projection]) for slot, adapter in enumerate(adapters)
                           if projection in adapter.layers[index]]  # fmt: skip
                layout = tuple((slot, delta.a.shape[0]) for slot, delta in members)
                a = torch.cat([delta.a for _, delta in members])
                b_t = torch.cat([delta.b.t() for _, delta in members])
                stacked[projection] = StackedProjection(a, b_t, layouts.setdefault(layout, len(layouts)))
            layers.append(stacked)
        device = next(d.a.device for adapter in adapters for layer in adapter.layers for d in layer.values())
        column_slots = tuple(_column_slots(layout, device) for layout in layouts)
        return cls(adapters, tuple(layers), tuple(layouts), column_slots)


def _column_slots(layout: tuple[tuple[int, int], ...], device: torch.device) -> torch.Tensor:
    """Each column's slot, from the (slot, rank) of the adapters stacked."""
    slots = [slot for slot, rank in layout for _ in range(rank)]
    return torch.tensor(slots, dtype=torch.long, device=device)


class StackCache:
    """Stacks of recently seen sets of adapters, reused across steps (least recently used dropped first).

    Adapters come and go from a running batch at every request's start and end, so an exact-set cache would miss
    often; a step takes the smallest cached stack holding all its adapters (the same objects, by name) if it is
    at most MAX_STACK_WASTE times as wide, and a miss builds the union with the last stack used when that stays
    within the bound, so a batch whose adapters churn settles on one stack."""

    def __init__(self, max_stacks: int = MAX_CACHED_STACKS) -> None:
        self.max_stacks = max_stacks
        self.stacks: OrderedDict[tuple[str, ...], StackedDeltas] = OrderedDict()  # names in slot order -> stack
        self.num_builds = 0  # for tests and benchmarks: how often a step had to build

    def get(self, adapters: dict[str, LoraAdapter]) -> StackedDeltas:
        """A stack holding every adapter of `adapters` (name -> adapter), cached or built."""
        width = _width(adapters.values())
        fits = [stack for stack in self.stacks.values()
                if _holds(stack, adapters) and _width(stack.adapters) <= MAX_STACK_WASTE * width]  # fmt: skip
        if fits:
            stack = min(fits, key=lambda s: _width(s.adapters))
            self.stacks.move_to_end(stack.names)
            return stack
        wanted = dict(adapters)
        if self.stacks:  # widen to the last stack's other adapters when within bound: churn converges
            last = {a.name: a for a in next(reversed(self.stacks.values())).adapters if a.name not in adapters}
            if _width([*adapters.values(), *last.values()]) <= MAX_STACK_WASTE * width:
                wanted.update(last)
        stack = StackedDeltas.build(wanted[name] for name in sorted(wanted))
        self.num_builds += 1
        self.stacks[stack.names] = stack
        self.stacks.move_to_end(stack.names)  # a name served anew replaces its old stack in place
        while len(self.stacks) > self.max_stacks:
            self.stacks.popitem(last=False)
        return stack


def _width(adapters: Iterable[LoraAdapter]) -> int:
    """What multiplying by a set of adapters costs, roughly: its columns over all projections (ranks x targets)."""
    return sum(adapter.rank * len(adapter.targets) for adapter in adapters)


def _holds(stack: StackedDeltas, adapters: dict[str, LoraAdapter]) -> bool:
    """Whether the stack's slots hold these very adapters (a name served anew is another adapter)."""
    mine = {adapter.name: adapter for adapter in stack.adapters}
    return all(mine.get(name) is adapter for name, adapter in adapters.items())


@dataclass(frozen=True)
class SortedRows:
    """A many-row step's rows of an adapter, sorted by slot: the permutation and each slot's slice of it."""

    order: torch.Tensor  # (rows with an adapter,) long: row indices, by slot
    segments: tuple[tuple[LoraAdapter, int, int], ...]  # (adapter, start, end) in `order`
    in_place: bool  # `order` is every row in its own order: no gather, no scatter


@dataclass
class LoraBatch:
    """Which rows of a step's flat batch run which adapter: each row's slot in a stack (-1 for none)."""

    num_rows: int
    stacked: StackedDeltas
    row_slots: torch.Tensor  # (num_rows,) long, on the batch's device
    slots_present: frozenset[int] = frozenset()  # the slots some row runs
    has_base_rows: bool = False  # some row runs no adapter
    sorted_rows: SortedRows | None = None  # the many-row form; None: the masked one
    masks: dict[int, torch.Tensor | None] = field(default_factory=dict)  # per layout, made at its first use

    @classmethod
    def from_spans(
        cls, spans: list[tuple[LoraAdapter | None, int]], device: torch.device | str, cache: StackCache | None = None
    ) -> LoraBatch | None:
        """From each item's (adapter or None, number of rows), in the batch's order; None when no row has one.
        The stack comes from `cache` (None: built for this step alone)."""
        present = {adapter.name: adapter for adapter, _ in spans if adapter is not None}
        if not present:
            return None
        stacked = (cache if cache is not None else StackCache()).get(present)
        slot_of = {name: slot for slot, name in enumerate(stacked.names)}
        slots = [slot_of[adapter.name] if adapter is not None else -1 for adapter, count in spans for _ in range(count)]
        row_slots = torch.tensor(slots, dtype=torch.long, device=device)
        sorted_rows = _sorted_rows(slots, stacked, device) if len(slots) > MASKED_MAX_ROWS else None
        present_slots = frozenset(slot_of[name] for name in present)
        return cls(len(slots), stacked, row_slots, present_slots, -1 in slots, sorted_rows)

    def add_deltas(self, out: torch.Tensor, x: torch.Tensor, layer: int, projection: str) -> torch.Tensor:
        """out (T, out) += each row's adapter's delta of `projection` in `layer`; returns out."""
        stacked = self.stacked.layers[layer].get(projection)
        if stacked is None:
            return out
        if self.sorted_rows is not None:
            return self._add_sorted(out, x, layer, projection)
        shrunk = x.to(stacked.a.dtype) @ stacked.a.t()  # (T, sum of ranks): every row through every slot's A
        mask = self._mask(stacked.layout)
        if mask is not None:
            shrunk.mul_(mask)  # each row keeps its own slot's columns only
        return _add(out, shrunk, stacked.b_t)

    def _mask(self, layout: int) -> torch.Tensor | None:
        """(T, columns) float32, 1 where a column is of the row's own slot; None where every one is (decided
        from the Python-side slots: no device sync)."""
        if layout not in self.masks:
            column_slots = {slot for slot, _ in self.stacked.layouts[layout]}
            if len(self.slots_present) == 1 and column_slots == self.slots_present and not self.has_base_rows:
                self.masks[layout] = None
            else:
                columns = self.stacked.column_slots[layout]
                self.masks[layout] = (self.row_slots[:, None] == columns[None, :]).float()
        return self.masks[layout]

    def _add_sorted(self, out: torch.Tensor, x: torch.Tensor, layer: int, projection: str) -> torch.Tensor:
        """The many-row form: each adapter's matmul pair on its own rows, gathered and scattered once (not at
        all when the rows already lie in slot order)."""
        rows = self.sorted_rows
        assert rows is not None
        gathered = x if rows.in_place else x.index_select(0, rows.order)
        target = out if rows.in_place else torch.zeros(gathered.shape[0], out.shape[1], device=out.device)
        for adapter, start, end in rows.segments:
            delta = adapter.layers[layer].get(projection)
            if delta is not None:
                _add(target[start:end], gathered[start:end].to(delta.a.dtype) @ delta.a.t(), delta.b.t())
        return out if rows.in_place else out.index_add_(0, rows.order, target.to(out.dtype))


def _add(out: torch.Tensor, shrunk: torch.Tensor, b_t: torch.Tensor) -> torch.Tensor:
    """out += shrunk B^T, the float32 product rounded once into out's dtype."""
    if out.dtype == b_t.dtype:
        return out.addmm_(shrunk, b_t)
    return out.add_((shrunk @ b_t).to(out.dtype))


def _sorted_rows(slots: list[int], stacked: StackedDeltas, device: torch.device | str) -> SortedRows:
    """The rows that run an adapter, sorted by slot (stable: a prompt's rows stay one slice)."""
    order = sorted((row for row, slot in enumerate(slots) if slot >= 0), key=slots.__getitem__)
    segments: list[tuple[LoraAdapter, int, int]] = []
    for position, row in enumerate(order):
        adapter = stacked.adapters[slots[row]]
        if segments and segments[-1][0] is adapter:
            segments[-1] = (adapter, segments[-1][1], position + 1)
        else:
            segments.append((adapter, position, position + 1))
    in_place = order == list(range(len(slots)))
    return SortedRows(torch.tensor(order, dtype=torch.long, device=device), tuple(segments), in_place)


def merged_weight(base: torch.Tensor, delta: ProjectionDelta) -> torch.Tensor:
    """The dense weight with the adapter merged in, W + B A (for checks: what an unmerged product must equal)."""
    return (base.float() + delta.b.float() @ delta.a.float()).to(base.dtype)
