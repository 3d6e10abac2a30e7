"""Step cost: what one step of the model costs in time, learned from the steps the engine runs.

A step's time is modelled as

    step_ms = fixed_ms + decode_row_ms * decode rows + prefill_token_ms * prefill tokens
              + attention_ms * attended pairs / 1000

where attended pairs counts, over the step's entries, new tokens x the context each attends to (the part of
attention that grows with the context). The four figures are fitted by non-negative least squares over the
last `window` steps the engine observed, each step weighted alike, with a light pull towards the previous fit
so that a window of alike steps (all decodes of one batch size) leaves the other figures where they were.

The scheduler asks `prefill_tokens_within(budget_ms, ...)`: how many prompt tokens fit in what is left of a
step's time target after its decodes (Sarathi-Serve's stall-free batching, with the budget learned rather
than profiled offline). Until a first fit exists the answer is None: the token budget alone decides.

This module knows nothing of sequences, tensors or the scheduler's queues.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

FEATURES = ("fixed", "decode_rows", "prefill_tokens", "attended_kilopairs")


@dataclass(frozen=True)
class StepShape:
    """What a step computed: decode rows (one new token each), prefill tokens, and attended pairs."""

    num_decode_rows: int = 0
    num_prefill_tokens: int = 0
    num_attended_pairs: int = 0  # sum over entries of new tokens x context length

    def features(self) -> tuple[float, float, float, float]:
        return 1.0, float(self.num_decode_rows), float(self.num_prefill_tokens), self.num_attended_pairs / 1000


@dataclass(frozen=True)
class StepCost:
    """The fitted figures, in milliseconds."""

    fixed_ms: float
    decode_row_ms: float
    prefill_token_ms: float
    attention_ms_per_kilopair: float

    def of(self, shape: StepShape) -> float:
        """The predicted time of a step of this shape, ms."""
        weights = (self.fixed_ms, self.decode_row_ms, self.prefill_token_ms, self.attention_ms_per_kilopair)
        return sum(w * f for w, f in zip(weights, shape.features(), strict=True))


class StepCostModel:
    """Observed steps in, a `StepCost` out (refitted every `refit_every` observations)."""

    def __init__(self, window: int = 256, refit_every: int = 8, min_steps: int = 4, prior_weight: float = 0.5) -> None:
        self._shapes: deque[tuple[float, float, float, float]] = deque(maxlen=window)
        self._times_ms: deque[float] = deque(maxlen=window)
        self._refit_every = refit_every
        self._min_steps = min_steps
        self._prior_weight = prior_weight  # how hard the previous fit pulls, as a count of steps
        self._num_since_fit = 0
        self.cost: StepCost | None = None
        self.num_observed = 0

    def observe(self, shape: StepShape, elapsed_ms: float) -> None:
        """Record one step's shape and measured time; refit when due."""
        self._shapes.append(shape.features())
        self._times_ms.append(elapsed_ms)
        self.num_observed += 1
        self._num_since_fit += 1
        if len(self._times_ms) >= self._min_steps and (self.cost is None or self._num_since_fit >= self._refit_every):
            self.refit()

    def forget(self) -> None:
        """Drop every observation and the fit (e.g. after warm-up steps that paid one-time costs)."""
        self._shapes.clear()
        self._times_ms.clear()
        self.cost, self._num_since_fit = None, 0

    def refit(self) -> None:
        design, times = np.array(self._shapes), np.array(self._times_ms)
        scale = np.maximum(design.max(axis=0), 1e-9)  # columns of like size, so nnls weighs them fairly
        design = design / scale
        if self.cost is not None:  # the previous fit as extra rows: one per figure, towards its old value
            old = np.array([self.cost.fixed_ms, self.cost.decode_row_ms, self.cost.prefill_token_ms,
                            self.cost.attention_ms_per_kilopair]) * scale
            pull = np.sqrt(self._prior_weight)
            design = np.vstack([design, np.eye(len(FEATURES)) * pull])
            times = np.concatenate([times, old * pull])
        weights, _ = nnls(design, times)
        self.cost = StepCost(*(float(w) for w in weights / scale))
        self._num_since_fit = 0

    def prefill_tokens_within(self, budget_ms: float, so_far: StepShape, context_tokens: int) -> int | None:
        """The most prompt tokens of one sequence (whose `context_tokens` are already computed) that keep a step
        already holding `so_far` within `budget_ms`; None before the first fit."""
        if self.cost is None:
            return None
        left_ms = budget_ms - self.cost.of(so_far)
        # each new token attends to the context and, on average, half the chunk: counted at the context's end
        per_token_ms = self.cost.prefill_token_ms + self.cost.attention_ms_per_kilopair * context_tokens / 1000
        if left_ms <= 0:
            return 0
        if per_token_ms <= 0:
            return 1 << 30  # free as far as the fit knows: the token budget decides
        return int(left_ms / per_token_ms)
