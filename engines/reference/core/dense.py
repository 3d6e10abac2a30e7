"""How a dense weight is multiplied: `dense_linear(x, weight)`, x (T, in) @ weight (out, in).T -> (T, out).

bfloat16 on CPU: the weight is laid out once for oneDNN's matmul (`pack`, `PackedWeight`).

`F.linear` reads an (out, in) weight in its row-major layout at every call. oneDNN's own blocked layout,
made once at load (`torch.ops.mkldnn._reorder_linear_weight`, as torch.compile's CPU freezing does), streams
better. Measured here over SmolLM2-135M's 121 projections and head, bfloat16, a pass over all of them:
25.3 ms against 32.4 ms at 16 rows, 33.6 against 50.7 at 64, 25.6 against 35.0 at one (`benchmarks/
decode_step.py` shows what it does to a whole step). The values are the same to the bit. In float32 it was
no faster at a few rows, so float32 weights, and any device but a CPU, stay as they are.

float32 on CPU: computed as weight @ x.T, a GEMM that MKL runs about 1.5-2x faster than F.linear's x @ weight.T
at a few rows (decode), and a single row is sent as two because the two-column GEMM beats the matrix-vector
path (the weights are read once either way).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class PackedWeight(nn.Module):
    """An (out, in) bfloat16 weight in oneDNN's layout; `linear` is x @ weight.T."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.packed = nn.Parameter(torch.ops.mkldnn._reorder_linear_weight(weight.detach()), requires_grad=False)

    @property
    def shape(self) -> torch.Size:
        return self.packed.shape

    def linear(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")

    def values(self) -> torch.Tensor:
        """The weight in its plain layout (a copy, for checks)."""
        return self.packed.to_dense()


def can_pack(weight: torch.Tensor) -> bool:
    return weight.device.type == "cpu" and weight.dtype == torch.bfloat16 and weight.dim() == 2 \
        and torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def pack(weight: torch.Tensor) -> torch.Tensor | PackedWeight:
    """The weight packed where oneDNN runs it faster (bfloat16 on CPU), else as it is."""
    return PackedWeight(weight) if can_pack(weight) else weight


def dense_linear(x: torch.Tensor, weight: torch.Tensor | PackedWeight) -> torch.Tensor:
    """x (T, in) @ weight (out, in).T -> (T, out), contiguous."""
    if isinstance(weight, PackedWeight):
        return weight.linear(x)
    if x.dtype != torch.float32 or x.device.type != "cpu":
        return F.linear(x, weight)
    if x.shape[0] == 1:
        return torch.mm(weight, x.repeat(2, 1).t())[:, 0].unsqueeze(0).contiguous()  # (1, out)
    return torch.mm(weight, x.t()).t().contiguous()  # (T, out)


def dense_values(weight: torch.Tensor | PackedWeight) -> torch.Tensor:
    """The weight's values in the plain layout."""
    return weight.values() if isinstance(weight, PackedWeight) else weight
