"""Arrival schedules: seeded, at the asked mean rate, as bursty as asked."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from loadgen.arrivals import Level, arrival_offsets


def gaps(rate: float, burstiness: float, n: int = 40_000, seed: int = 5) -> np.ndarray:
    times = np.fromiter(itertools.islice(arrival_offsets(rate, burstiness, seed), n), dtype=float)
    return np.diff(times)


def test_schedule_starts_at_zero_and_only_moves_forward() -> None:
    times = list(itertools.islice(arrival_offsets(10.0, 1.0, seed=0), 3000))
    assert times[0] == 0.0
    assert all(b > a for a, b in itertools.pairwise(times))


@pytest.mark.parametrize("rate", [0.5, 4.0, 200.0])
def test_poisson_schedule_has_the_asked_mean_rate(rate: float) -> None:
    assert 1 / gaps(rate, 1.0).mean() == pytest.approx(rate, rel=0.02)


def test_poisson_gaps_have_unit_coefficient_of_variation() -> None:
    g = gaps(8.0, 1.0)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 4.0])
def test_gamma_burstiness_sets_the_variability_and_keeps_the_rate(burstiness: float) -> None:
    g = gaps(8.0, burstiness)
    assert 1 / g.mean() == pytest.approx(8.0, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.05)


def test_same_seed_same_schedule_other_seed_other_schedule() -> None:
    assert np.array_equal(gaps(3.0, 1.0, 500, seed=1), gaps(3.0, 1.0, 500, seed=1))
    assert not np.array_equal(gaps(3.0, 1.0, 500, seed=1), gaps(3.0, 1.0, 500, seed=2))


@pytest.mark.parametrize(("kind", "value", "message"), [
    ("concurrency", 0, "concurrency must be a whole number >= 1"),
    ("concurrency", 2.5, "concurrency must be a whole number >= 1"),
    ("rate", 0, "rate must be > 0"),
])
def test_bad_levels_are_refused_with_the_accepted_range(kind: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Level(kind, value)  # type: ignore[arg-type]


def test_level_labels_name_kind_and_value() -> None:
    assert Level("concurrency", 8).label == "c8"
    assert Level("rate", 2.5).label == "r2.5"
