"""Which product a quantized weight runs at each number of rows: chosen by timing both on this machine at load.

A quantized weight (`core/quant.py`) multiplies either by its weight-only kernel, which reads a quarter (int4)
or half (int8) of the bytes, or by its dense copy (oneDNN's packed bfloat16, or MKL's float32 GEMM). Which is
faster depends on the CPU (its vector extensions, its cache sizes), on the weight's shape and on the number of
rows, so no table by CPU family holds: on one 2-core Intel Xeon here, in float32, the int4 kernel took 0.03 ms
against 0.10 ms for a 960 x 576 projection at one row and lost at 16 rows, while on a 2-core AMD EPYC the
engine's one-user decode ran at 0.71-0.78x llama.cpp's with the kernels picked by a fixed table.

So at load, for each distinct (shape, format) among the model's quantized weights, both products are timed at 1,
2, 4, 8 and 16 rows, and every weight of that shape runs the kernel up to the most rows at which it won at every
count up to there: 0 where it never wins (the dense copy always). Both read the same values (the dense copy holds
the kernel's own weights, dequantized).

Each call reads a weight from memory, as a step does: the calls go round the shape's weights (one layer's, then
the next's), so a weight read a moment ago is not read again from the caches. Timing one weight over and over
measured its cached copy instead, which flatters the dense product (4x the bytes of int4): on a 2-core AMD EPYC
in bfloat16 the MLP's two shapes came out near ties at one row (3072x576: int4 0.057 ms, dense 0.058 ms), so a
load picked either, and a one-user step with the dense copy there took 20.9 ms against 14.7 ms. Read from
memory, int4 wins by 2.3x (0.063 against 0.144 ms). The two products take turns on each weight, and each keeps
the median of its calls (on a shared machine a call that lost its core to another process says nothing about
the kernel).

This module knows nothing of models' structure beyond their quantized weights.
"""

from __future__ import annotations

import statistics
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
        kernel_ms, dense_ms = _times(members, dtype, repeats)
        max_rows = _max_winning_rows(kernel_ms, dense_ms)
        for weight in members:
            weight.max_rows = max_rows
        choices.append(KernelChoice(weight_format, shape, len(members), max_rows, kernel_ms, dense_ms))
    return choices


def _times(weights: list[QuantizedWeight], dtype: torch.dtype,
           repeats: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Each product's median time at each of ROW_COUNTS, over at least `repeats` calls going round `weights`."""
    kernel_ms, dense_ms = [], []
    generator = torch.Generator().manual_seed(0)
    rounds = -(-repeats // len(weights))  # every weight at least once, `repeats` calls at least
    for rows in ROW_COUNTS:
        x = torch.randn(rows, weights[0].shape[1], generator=generator).to(dtype)
        calls = [(lambda w=w, x=x: w.kernel_linear(x), lambda w=w, x=x: dense_linear(x, w.dense))
                 for w in weights] * rounds
        kernel, dense = _median_ms_in_turns(calls)
        kernel_ms.append(kernel)
        dense_ms.append(dense)
    return tuple(kernel_ms), tuple(dense_ms)


def _median_ms_in_turns(calls: list[tuple[Callable[[], object], Callable[[], object]]]) -> tuple[float, float]:
    """Each pair's two calls in turn (so a slow moment of a shared machine falls on both), after one call of the
    first pair each to warm the code paths; the median time of each side."""
    calls[0][0](), calls[0][1]()
    times: tuple[list[float], list[float]] = ([], [])
    for pair in calls:
        for call, kept in zip(pair, times, strict=True):
            started = time.perf_counter()
            call()
            kept.append((time.perf_counter() - started) * 1000)
    return statistics.median(times[0]), statistics.median(times[1])


def _max_winning_rows(kernel_ms: tuple[float, ...], dense_ms: tuple[float, ...]) -> int:
    """The most rows up to which the kernel was faster at every count measured (0: not even at one row)."""
    max_rows = 0
    for rows, kernel, dense in zip(ROW_COUNTS, kernel_ms, dense_ms, strict=True):
        if kernel >= dense:
            break
        max_rows = rows
    return max_rows
