"""LoRA adapters on the decoder's projections: y = x W^T + scaling * (x A^T) B^T, per row of a batch.

Contract: a `LoraAdapter` holds, per layer and per fused projection (`qkv_proj`, `o_proj`, `gate_up_proj`,
`down_proj`), one `ProjectionDelta`: the A matrices of the Hugging Face targets it covers stacked ([A_q; A_v]
for q_proj and v_proj), and a B whose blocks put each target's product on its own rows of the fused output,
zero elsewhere, scaling already multiplied in. So one projection of one adapter is two matmuls, whatever it
targets. A `LoraBatch` says which rows of a step's flat batch belong to which adapter; `add_deltas` adds each
adapter's product to its own rows (gathered by index), and rows without an adapter are left as the base
computed them. The base weights stay as they are kept (dense, int8 or int4): the delta is added to their output.

This module knows nothing of files (`loading/lora.py` reads the PEFT layout) or of scheduling.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

# Hugging Face's projection names, in the order their rows lie in our fused projections
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


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


@dataclass
class LoraBatch:
    """Which rows of a step's flat batch run which adapter (rows of no adapter are in no group)."""

    num_rows: int
    groups: list[tuple[LoraAdapter, torch.Tensor]] = field(default_factory=list)  # (adapter, row indices)

    @classmethod
    def from_spans(cls, spans: list[tuple[LoraAdapter | None, int]], device: torch.device | str) -> LoraBatch | None:
        """From each item's (adapter or None, number of rows), in the batch's order; None when no row has one."""
        rows: dict[str, tuple[LoraAdapter, list[int]]] = {}
        start = 0
        for adapter, count in spans:
            if adapter is not None:
                rows.setdefault(adapter.name, (adapter, []))[1].extend(range(start, start + count))
            start += count
        if not rows:
            return None
        groups = [(adapter, torch.tensor(idx, dtype=torch.long, device=device)) for adapter, idx in rows.values()]
        return cls(start, groups)

    def add_deltas(self, out: torch.Tensor, x: torch.Tensor, layer: int, projection: str) -> torch.Tensor:
        """out (T, out) += each group's delta of `projection` in `layer`, on its own rows; returns out."""
        for adapter, rows in self.groups:
            delta = adapter.layers[layer].get(projection)
            if delta is None:
                continue
            if rows.numel() == self.num_rows:  # every row runs this adapter: no gather
                out.add_(delta.product(x).to(out.dtype))
            else:
                out.index_add_(0, rows, delta.product(x.index_select(0, rows)).to(out.dtype))
        return out


def merged_weight(base: torch.Tensor, delta: ProjectionDelta) -> torch.Tensor:
    """The dense weight with the adapter merged in, W + B A (for checks: what an unmerged product must equal)."""
    return (base.float() + delta.b.float() @ delta.a.float()).to(base.dtype)
