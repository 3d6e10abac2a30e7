"""Weights kept quantized: int8 (one scale per output row) and int4 (a scale and zero per 32 inputs), run
by PyTorch's weight-only kernels (`_weight_int8pack_mm`, `_weight_int4pack_mm_for_cpu`).

Decoding a few sequences reads every weight for little arithmetic, so a weight read in a quarter of the
bytes is a step about that much shorter; those kernels are made for exactly that case (a few rows of
activations, in bfloat16). With many rows (a prefill, a large batch) they lose to a dense matmul, so a
quantized weight keeps a dense copy of itself beside it (its own values dequantized, so both read the same
weights; the kernel rounds the activations to bfloat16, so a float32 model's logits still differ slightly with
the number of rows) and `QuantizedWeight.linear` picks by the number of rows: the quantized kernel up to
its `max_rows` (`MAX_ROWS`, `HEAD_MAX_ROWS`), the dense copy above (packed for oneDNN in bfloat16,
`core/dense.py`). The copy costs memory, not time: a step at a few users reads only the quantized bytes.

int4's grid is asymmetric: w = (q - 8) * scale + zero, q in 0..15, per group of 32 inputs: a GGUF Q4_1 block
(32 values q * d + m, its minimum and maximum among them) lands on the same grid, bar the scale and zero
rounded to bfloat16; a Q4_0 block ((q - 8) * d, which need not reach both ends) is found on its own grid and
kept on it (`_grids`). A Q4_K sub-block need not lie on either, so `auto` keeps Q4_K as int8. int8 is
symmetric per output row.
"""

from __future__ import annotations

import torch
from torch import nn

from engines.reference.core.config import WEIGHT_FORMATS
from engines.reference.core.dense import PackedWeight, dense_linear, dense_values, pack

__all__ = ["WEIGHT_FORMATS", "Int4Weight", "Int8Weight", "QuantizedWeight", "quantize"]

# Up to this many rows a product runs the quantized kernel, above it the dense copy, which is faster there on
# CPU. Measured on SmolLM2-135M here: int4 projections in a whole decode forward took 0.82x the dense time at
# 6 rows, 0.87x at 8, a tie at 12 and 1.2x at 16; int8 ones 16.8 against 22.5 ms a pass at 4 rows, 31 against
# 23 at 8. SmolLM2's LM head (49,152 x 576) loses sooner: int8 2.45 against 2.14 ms at 3 rows, int4 a tie at
# 4. The defaults of a weight made on its own; a loaded model's weights are timed on the machine at hand and
# set by that (`core/kernel_choice.py`).
MAX_ROWS = {"int8": 4, "int4": 8}
HEAD_MAX_ROWS = {"int8": 2, "int4": 4}
INT4_GROUP = 32
INT4_INNER_K_TILES = 2


class QuantizedWeight(nn.Module):
    """A (out, in) weight, quantized, with a dense copy of the quantized values for many-row products."""

    format: str

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.max_rows = MAX_ROWS[self.format]  # products of more rows use the dense copy
        # the dense copy: the weight's storage, refilled with the dequantized values once built, then packed
        self.dense: torch.Tensor | PackedWeight = nn.Parameter(weight, requires_grad=False)

    def _keep_dequantized(self) -> None:
        assert isinstance(self.dense, torch.Tensor)  # not packed yet
        with torch.no_grad():
            dense = self.dense.copy_(self.dequantized().to(self.dense.dtype))
        del self.dense
        self.dense = pack(dense)

    @property
    def shape(self) -> torch.Size:
        return self.dense.shape

    def quantized_bytes(self) -> int:
        """What a few-row product reads."""
        return sum(b.numel() * b.element_size() for b in self.buffers())

    def linear(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > self.max_rows or x.device.type != "cpu":
            return dense_linear(x, self.dense)
        return self.kernel_linear(x)

    def kernel_linear(self, x: torch.Tensor) -> torch.Tensor:
        """x (T, in) @ weight.T by the weight-only kernel, whatever the rows (in x's dtype)."""
        if x.dtype == torch.bfloat16:  # the model's usual dtype: no no-op conversions (two a product, 0.6 ms a step)
            return self.product(x)
        return self.product(x.to(torch.bfloat16)).to(x.dtype)

    def product(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def dequantized(self) -> torch.Tensor:
        """The weight as the quantized kernel sees it, in float32 (for checks)."""
        raise NotImplementedError


class Int8Weight(QuantizedWeight):
    format = "int8"
    q: torch.Tensor  # (out, in) int8
    scales: torch.Tensor  # (out,) bfloat16

    def __init__(self, dense: torch.Tensor) -> None:
        super().__init__(dense)
        w = dense.float()
        scales = (w.abs().amax(dim=1) / 127).clamp(min=1e-12)
        self.register_buffer("q", torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scales.to(torch.bfloat16))
        self._keep_dequantized()

    def product(self, x: torch.Tensor) -> torch.Tensor:
        return torch._weight_int8pack_mm(x, self.q, self.scales)

    def dequantized(self) -> torch.Tensor:
        return self.q.float() * self.scales.float()[:, None]


class Int4Weight(QuantizedWeight):
    format = "int4"
    packed: torch.Tensor  # the kernel's packed layout of the 4-bit values
    scales_zeros: torch.Tensor  # (in / group, out, 2) bfloat16
    _q: torch.Tensor  # while building: the 4-bit values, unpacked

    def __init__(self, dense: torch.Tensor) -> None:
        super().__init__(dense)
        out_features, in_features = dense.shape
        groups = dense.float().reshape(out_features, in_features // INT4_GROUP, INT4_GROUP)
        scales, zeros = _grids(groups)
        q = torch.round((groups - zeros[..., None]) / scales[..., None] + 8).clamp(0, 15).to(torch.int32)
        self.register_buffer("packed", torch._convert_weight_to_int4pack_for_cpu(
            q.reshape(out_features, in_features), INT4_INNER_K_TILES))
        # (in / group, out, 2): the kernel's layout of scales and zeros
        self.register_buffer("scales_zeros", torch.stack([scales.t(), zeros.t()], dim=-1).to(torch.bfloat16))
        self._q = q.to(torch.uint8)  # unpacked, for `dequantized` (not a buffer: not what a step reads)
        self._keep_dequantized()
        del self._q

    def product(self, x: torch.Tensor) -> torch.Tensor:
        return torch._weight_int4pack_mm_for_cpu(x, self.packed, INT4_GROUP, self.scales_zeros)

    def dequantized(self) -> torch.Tensor:
        if not hasattr(self, "_q"):  # once built, the dense copy holds exactly these values
            return dense_values(self.dense).float()
        scales, zeros = self.scales_zeros.float().unbind(-1)  # (in / group, out) each
        q = self._q.float().reshape(self.shape[0], -1, INT4_GROUP)
        return ((q - 8) * scales.t()[..., None] + zeros.t()[..., None]).reshape(self.shape)


ON_GRID = 0.1  # in steps: a file's 4-bit values, read back through bfloat16, lie within about 1/20 of theirs


def _grids(groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per group of 32 (..., 32): the scale and zero of int4's grid w = (q - 8) * scale + zero, each a bfloat16
    value (the kernel's), in float32.

    A GGUF Q4_1 block's own grid runs from its minimum to its maximum in 15 steps; a Q4_0 block's is
    (q - 8) * d with d = -(its value of largest magnitude) / 8, zero 0 (llama.cpp's quantizer), which need not
    reach both ends. A group on Q4_1's grid keeps it; one on neither (a float weight, a Q4_K sub-block) gets it too."""
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scales = ((high - low) / 15).clamp(min=1e-12).to(torch.bfloat16).float()
    zeros = (low + 8 * scales).to(torch.bfloat16).float()  # from the rounded scale: q = 0 lands on the minimum
    extreme = torch.where(high.abs() >= low.abs(), high, low)
    symmetric = (-extreme / 8).where(extreme != 0, torch.ones_like(extreme)).to(torch.bfloat16).float()
    levels = groups / symmetric[..., None] + 8
    nearest = levels.round()
    off_q4_0 = (levels - nearest).abs().amax(-1)
    in_range = ((nearest >= 0) & (nearest <= 15)).all(-1)
    on_q4_1 = (groups - low[..., None]) / scales[..., None]
    off_q4_1 = (on_q4_1 - on_q4_1.round()).abs().amax(-1)
    use_q4_0 = in_range & (off_q4_0 <= ON_GRID) & (off_q4_1 > ON_GRID)  # Q4_1's grid wherever it holds
    return scales.where(~use_q4_0, symmetric), zeros.where(~use_q4_0, torch.zeros_like(zeros))


def can_hold_int4(shape: torch.Size | tuple[int, ...]) -> bool:
    """Whether a (out, in) weight fits the int4 kernel's layout: out a multiple of 16, in of 32 and 64."""
    out_features, in_features = shape
    return out_features % 16 == 0 and in_features % (INT4_GROUP * INT4_INNER_K_TILES) == 0


def quantize(weight: torch.Tensor, weight_format: str) -> torch.Tensor | QuantizedWeight:
    """The weight in `weight_format` (bf16: as it is); a shape the int4 kernel can't hold is kept int8."""
    if weight_format == "bf16":
        return weight
    if weight_format == "int4" and can_hold_int4(weight.shape):
        return Int4Weight(weight.detach())
    return Int8Weight(weight.detach())


def kernels_available(device: torch.device | str) -> bool:
    """The weight-only kernels run on CPU; on another device the weights stay dense."""
    return torch.device(device).type == "cpu" and hasattr(torch, "_weight_int4pack_mm_for_cpu") \
        and hasattr(torch, "_weight_int8pack_mm")
