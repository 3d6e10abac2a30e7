"""Per-request sampling parameters and one batched sampling step.

Contract: `sample(logits (B, vocab), params_list, generators) -> token ids (B,)`: greedy rows (temperature
0) take the argmax; the others apply temperature, then top-k, then top-p, and draw with their own
seeded torch.Generator (or the global RNG when unseeded), so a request's tokens depend only on its own
seed and logits, never on its batch neighbours. Stop strings, min/max tokens and EOS handling are the
engine's business; `banned_token_ids` lets it forbid EOS before min_tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_k: int | None = None  # None = whole vocabulary
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int | None = 16  # None = until a stop condition or the context limit
    min_tokens: int = 0
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        _check(self.temperature >= 0, "temperature", ">= 0 (0 = greedy)", self.temperature)
        _check(
            self.top_k is None or (_is_int(self.top_k) and self.top_k >= 1),
            "top_k",
            "None or an integer >= 1",
            self.top_k,
        )
        _check(0 < self.top_p <= 1, "top_p", "in (0, 1]", self.top_p)
        _check(
            self.seed is None or (_is_int(self.seed) and 0 <= self.seed < 2**63),
            "seed",
            "None or an integer in [0, 2**63)",
            self.seed,
        )
        _check(
            self.max_tokens is None or (_is_int(self.max_tokens) and self.max_tokens >= 1),
            "max_tokens",
            "None or an integer >= 1",
            self.max_tokens,
        )
        _check(
            _is_int(self.min_tokens) and 0 <= self.min_tokens <= (self.max_tokens or self.min_tokens),
            "min_tokens",
            "an integer in [0, max_tokens]",
            self.min_tokens,
        )
        _check(all(isinstance(s, str) and s for s in self.stop), "stop", "non-empty strings", self.stop)
        _check(
            all(_is_int(t) and t >= 0 for t in self.stop_token_ids),
            "stop_token_ids",
            "integers >= 0",
            self.stop_token_ids,
        )

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(ok: bool, name: str, accepted: str, value: object) -> None:
    if not ok:
        raise ValueError(f"SamplingParams.{name} must be {accepted}, got {value!r}")


def make_generator(params: SamplingParams, device: torch.device | str = "cpu") -> torch.Generator | None:
    """A generator seeded with params.seed, or None (global RNG) for unseeded requests."""
    if params.seed is None:
        return None
    return torch.Generator(device=device).manual_seed(params.seed)


def sample(
    logits: torch.Tensor,
    params_list: Sequence[SamplingParams],
    generators: Sequence[torch.Generator | None],
    banned_token_ids: Sequence[Sequence[int]] | None = None,
) -> torch.Tensor:
    """Draw one token per row of logits (B, vocab); returns (B,) int64 on the logits' device."""
    if not len(params_list) == len(generators) == logits.shape[0]:
        raise ValueError("sample() needs one SamplingParams and one generator per row of logits")
    logits = logits.float()
    if banned_token_ids is not None:
        logits = logits.clone()
        for row, banned in enumerate(banned_token_ids):
            if banned:
                logits[row, list(banned)] = float("-inf")
    tokens = logits.max(dim=-1).indices  # argmax's answer (the first maximum), about 1.5x faster on CPU
    random_rows = [i for i, p in enumerate(params_list) if not p.is_greedy]
    if random_rows:
        rows = torch.tensor(random_rows, device=logits.device)
        probs = _filtered_probs(logits.index_select(0, rows), [params_list[i] for i in random_rows])
        drawn = _draw(probs, [generators[i] for i in random_rows])
        tokens = tokens.index_copy(0, rows, drawn)
    return tokens


def _filtered_probs(logits: torch.Tensor, params_list: Sequence[SamplingParams]) -> torch.Tensor:
    """Temperature, then top-k, then top-p (the smallest set whose mass reaches top_p) -> probs (R, V)."""
    temperatures = torch.tensor([p.temperature for p in params_list], device=logits.device)
    logits = logits / temperatures[:, None]
    if all(p.top_k is None and p.top_p >= 1 for p in params_list):
        return logits.softmax(dim=-1)
    vocab = logits.shape[-1]
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (R, V)
    top_k = torch.tensor([min(p.top_k or vocab, vocab) for p in params_list], device=logits.device)
    ranks = torch.arange(vocab, device=logits.device)[None, :]
    sorted_logits = sorted_logits.masked_fill(ranks >= top_k[:, None], float("-inf"))
    sorted_probs = sorted_logits.softmax(dim=-1)
    top_p = torch.tensor([p.top_p for p in params_list], device=logits.device)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of strictly better tokens
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p[:, None], 0.0)
    return torch.zeros_like(sorted_probs).scatter_(1, order, sorted_probs)


def _draw(probs: torch.Tensor, generators: Sequence[torch.Generator | None]) -> torch.Tensor:
    """One draw per row: argmax(probs / Exp(1) noise), each seeded row with its own generator."""
    noise = torch.empty_like(probs)
    unseeded = [i for i, g in enumerate(generators) if g is None]
    if unseeded:
        noise[unseeded] = torch.empty(len(unseeded), probs.shape[1], device=probs.device).exponential_()
    for row, generator in enumerate(generators):
        if generator is not None:
            noise[row].exponential_(generator=generator)
    noise.clamp_min_(torch.finfo(noise.dtype).tiny)  # a zero draw would divide 0 by 0
    return (probs / noise).max(dim=-1).indices
