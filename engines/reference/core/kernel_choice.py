"""Which product a quantized weight runs at each number of rows: chosen by timing both on this machine at load.

A quantized weight (`core/quant.py`) multiplies either by its weight-only kernel, which reads a quarter (int4)
or half (int8) of the bytes, or by its dense copy (oneDNN's packed bfloat16, or MKL's float32 GEMM). Which is
faster depends on the CPU (its vector extensions, its cache sizes), on the weight's shape and on the number of
rows, so no table by CPU family holds: on one 2-core Intel Xeon here, in float32, the int4 kernel took 0.03 ms
against 0.10 ms for a 960 x 576 projection at one row and lost at 16 rows, while on a 2-core AMD EPYC the
engine's one-user decode ran at 0.71-0.78x llama.cpp's with the kernels picked by a fixed table.

So at load, for each distinct (shape, format) among the model's quantized weights, both products are timed on
one of them at 1, 2, 4, 8 and 16 rows (taking turns, the fastest of several calls: on a shared machine a call
that lost its core to another process says nothing about the kernel), and every weight of that
shape runs the kernel up to the most rows at which it won at every count up to there: 0 where it never wins (the
dense copy always). Both read the same values (the dense copy holds the kernel's own weights, dequantized).

This module knows nothing of models' structure beyond their quantized weights.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from engines.reference.core.dense import dense_linear
from engines.reference.core.quant import QuantizedWeight

ROW_COUNTS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class KernelChoice:
    """One shape's verdict: the kernel up to max_rows rows (0: the dense copy always), and the times behind it."""

    format: str
    shape: tuple[int, int]
    num_weights: int
    max_rows: int
    kernel_ms: tuple[float, ...]  # at each of ROW_COUNTS
    dense_ms: tuple[float, ...]

    def line(self) -> str:
        """For the log: what was chosen and the one-row times that say why."""
        out, inner = self.shape
        chosen = f"{self.format} kernel up to {self.max_rows} rows" if self.max_rows else "the dense copy"
        return (f"{self.num_weights} x {out}x{inner} {self.format}: {chosen} (1 row: {self.format} "
                f"{self.kernel_ms[0]:.3f} ms, dense {self.dense_ms[0]:.3f} ms)")


def choose_kernels(weights: Iterable[QuantizedWeight], dtype: torch.dtype, repeats: int = 9) -> list[KernelChoice]:
    """Time each distinct shape's two products and set every such weight's max_rows; the verdicts, by shape."""
    groups: dict[tuple[str, tuple[int, int]], list[QuantizedWeight]] = {}
    for weight in weights:
        if next(weight.buffers()).device.type == "cpu":  # elsewhere the dense product always runs
            groups.setdefault((weight.format, tuple(weight.shape)), []).append(weight)  # type: ignore[arg-type]
    choices = []
    for (weight_format, shape), members in groups.items():
        kernel_ms, dense_ms = _times(members[0], dtype, repeats)
        max_rows = _max_winning_rows(kernel_ms, dense_ms)
        for weight in members:
            weight.max_rows = max_rows
        choices.append(KernelChoice(weight_format, shape, len(members), max_rows, kernel_ms, dense_ms))
    return choices


def _times(weight: QuantizedWeight, dtype: torch.dtype, repeats: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    kernel_ms, dense_ms = [], []
    generator = torch.Generator().manual_seed(0)
    for rows in ROW_COUNTS:
        x = torch.randn(rows, weight.shape[1], generator=generator).to(dtype)
        kernel, dense = _fastest_ms_in_turns(lambda x=x: weight.kernel_linear(x),
                                            lambda x=x: dense_linear(x, weight.dense), repeats)
        kernel_ms.append(kernel)
        dense_ms.append(dense)
    return tuple(kernel_ms), tuple(dense_ms)


def _fastest_ms_in_turns(first: Callable[[], object], second: Callable[[], object],
                         repeats: int) -> tuple[float, float]:
    """Each called in turn (so a slow moment of a shared machine falls on both), after one call each to warm."""
    first(), second()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for call, kept in ((first, times[0]), (second, times[1])):
            started = time.perf_counter()
            call()
            kept.append((time.perf_counter() - started) * 1000)
    return min(times[0]), min(times[1])


def _max_winning_rows(kernel_ms: tuple[float, ...], dense_ms: tuple[float, ...]) -> int:
    """The most rows up to which the kernel was faster at every count measured (0: not even at one row)."""
    max_rows = 0
    for rows, kernel, dense in zip(ROW_COUNTS, kernel_ms, dense_ms, strict=True):
        if kernel >= dense:
            break
        max_rows = rows
    return max_rows
