"""Sampling: greedy, seeded reproducibility, top-k / top-p filtering and parameter validation."""

from __future__ import annotations

import pytest
import torch

from engines.reference.core.sampling import SamplingParams, make_generator, sample

VOCAB = 50


def _logits(batch: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def _draws(params: SamplingParams, logits: torch.Tensor, steps: int = 20) -> list[list[int]]:
    generators = [make_generator(params) for _ in range(logits.shape[0])]
    return [sample(logits, [params] * logits.shape[0], generators).tolist() for _ in range(steps)]


def test_temperature_zero_is_deterministic_greedy() -> None:
    """temperature 0 always returns each row's argmax, whatever the seed."""
    logits = _logits(4)
    for seed in (None, 1, 2):
        params = SamplingParams(temperature=0.0, seed=seed)
        assert all(draw == logits.argmax(-1).tolist() for draw in _draws(params, logits, steps=3))


def test_the_same_seed_gives_the_same_tokens_and_ignores_batch_neighbours() -> None:
    """A seeded request draws the same sequence alone or next to other rows; another seed differs."""
    logits = _logits(3)
    params = SamplingParams(temperature=1.0, seed=42)
    alone = [step[0] for step in _draws(params, logits[:1])]
    generators = [make_generator(params), None, make_generator(SamplingParams(seed=7))]
    neighbours = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.9, seed=7)]
    batched = [sample(logits[:1].repeat(3, 1), [params, *neighbours], generators)[0].item() for _ in range(20)]
    assert alone == batched
    assert alone != [step[0] for step in _draws(SamplingParams(temperature=1.0, seed=43), logits[:1])]


def test_top_k_one_equals_greedy() -> None:
    """With top_k=1 only the argmax survives, at any temperature."""
    logits = _logits(5, seed=3)
    params = SamplingParams(temperature=2.0, top_k=1, seed=0)
    assert all(draw == logits.argmax(-1).tolist() for draw in _draws(params, logits, steps=5))


def test_top_k_draws_stay_among_the_k_most_likely() -> None:
    """Every draw with top_k=3 is one of the row's three highest logits."""
    logits = _logits(2, seed=4)
    allowed = logits.topk(3, dim=-1).indices
    for draw in _draws(SamplingParams(temperature=5.0, top_k=3, seed=1), logits, steps=50):
        assert all(token in allowed[row].tolist() for row, token in enumerate(draw))


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    """probs 0.5, 0.3, 0.15, 0.05 with top_p 0.75: {0, 1} is the smallest set whose mass reaches 0.75."""
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    params = SamplingParams(temperature=1.0, top_p=0.75, seed=0)
    seen = {draw[0] for draw in _draws(params, logits, steps=200)}
    assert seen == {0, 1}
    exact = SamplingParams(temperature=1.0, top_p=0.8, seed=0)  # 0.5 + 0.3 reaches 0.8 exactly
    assert {draw[0] for draw in _draws(exact, logits, steps=200)} <= {0, 1}


def test_banned_tokens_are_never_drawn() -> None:
    """The engine can forbid EOS before min_tokens: a banned argmax is not chosen, even greedily."""
    logits = _logits(2, seed=5)
    banned = [[int(logits[0].argmax())], []]
    tokens = sample(logits, [SamplingParams(temperature=0.0)] * 2, [None, None], banned_token_ids=banned)
    assert tokens[0] != logits[0].argmax() and tokens[1] == logits[1].argmax()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1),
        ("top_k", 0),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("seed", -1),
        ("max_tokens", 0),
        ("min_tokens", -1),
        ("stop", [""]),
        ("stop_token_ids", [-2]),
    ],
)
def test_bad_params_raise_value_error_naming_the_field(field: str, value: object) -> None:
    """Each invalid value is rejected with a message naming the field and the accepted range."""
    with pytest.raises(ValueError, match=f"SamplingParams.{field} must be"):
        SamplingParams(**{field: value})


def test_min_tokens_cannot_exceed_max_tokens() -> None:
    """min_tokens is bounded by max_tokens; lists of stops are stored as tuples (the dataclass is frozen)."""
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(max_tokens=4, min_tokens=5)
    assert SamplingParams(stop=["\n\n"], stop_token_ids=[2]).stop == ("\n\n",)
