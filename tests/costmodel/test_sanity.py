"""Sanity bands: a self-hosted cost per 1M output tokens far from the published ones is called out, and the
warning reaches the decision."""

from __future__ import annotations

from datetime import date

import pytest

from costmodel.decide import decide, decide_given
from costmodel.inputs import Pricing, Requirements, Traffic
from costmodel.prices import load_catalog
from costmodel.sanity import WHY, model_params_b, sanity_warnings
from costmodel.types import EngineLevels, LatencyLimits, MeasuredLevel

CATALOG = load_catalog()
TODAY = date(2026, 12, 1)


@pytest.mark.parametrize(
    ("model", "params"),
    [
        ("llama-3.1-8b", 8),
        ("llama-3.3-70b", 70),
        ("qwen3-235b-a22b", 235),
        ("qwen-2.5-7b", 7),
        ("gpt-4o-mini", None),
        (None, None),
    ],
)
def test_the_model_size_is_read_from_the_id(model: str | None, params: float | None) -> None:
    assert model_params_b(model) == params


def test_an_8b_model_on_one_h100_inside_its_band_is_quiet() -> None:
    # $3.49/h at 3,000 tok/s: 3.49e6 / (3600 * 3000) = $0.323 per 1M output tokens, inside $0.15-0.60
    assert sanity_warnings(0.323, "llama-3.1-8b", "h100-sxm", 1, 3.49, concurrency=64) == []


@pytest.mark.parametrize(
    ("cost", "model", "gpu", "gpus", "price", "concurrency", "expected"),
    [
        (0.03, "llama-3.1-8b", "l4", 1, 0.75, 64, "below $0.05"),  # the floor holds on any GPU
        (6.0, "llama-3.1-8b", "h100-sxm", 1, 3.49, 16, "at 16 concurrent requests is above $5"),
        (0.10, "llama-3.1-8b", "h100-sxm", 1, 3.49, None, "outside the published $0.15-0.60 for an 8B model"),
        (0.90, "llama-3.1-8b", "h100-pcie", 1, 2.89, 8, "outside the published $0.15-0.60"),
        (6.0, "llama-3.1-8b", "h100-sxm", 1, 3.49, 8, "outside the published $0.15-0.60"),  # below c16: the band
        (2.00, "llama-3.3-70b", "h100-sxm", 2, 3.99, 32, "outside the published $0.40-1.20 for a 70B FP8 model"),
    ],
)
def test_far_outside_a_band_warns_and_says_what_it_may_mean(
    cost: float, model: str, gpu: str, gpus: int, price: float, concurrency: float | None, expected: str
) -> None:
    (warning,) = sanity_warnings(cost, model, gpu, gpus, price, concurrency)
    assert expected in warning and warning.endswith(WHY)


@pytest.mark.parametrize(
    ("cost", "model", "gpu", "gpus", "price", "concurrency"),
    [
        (6.0, "llama-3.3-70b", "a10g", 4, 1.0, 64),  # the $5 ceiling is for 8B-class models
        (0.10, "llama-3.1-8b", "h100-sxm", 1, 6.88, None),  # the band was drawn at $2.7-4/GPU-h, not at AWS's price
        (0.10, "llama-3.1-8b", "l40s", 1, 3.0, None),  # no band for this GPU
        (0.01, None, "h100-sxm", 1, 3.0, 64),  # model unknown: nothing to compare with
    ],
)
def test_where_no_band_applies_nothing_is_said(
    cost: float, model: str | None, gpu: str, gpus: int, price: float, concurrency: float | None
) -> None:
    assert sanity_warnings(cost, model, gpu, gpus, price, concurrency) == []


def _given(output_tokens_per_s: float) -> object:
    return decide_given(output_tokens_per_s, 256, 128, Traffic(monthly_tokens=3e9),
                        Pricing(gpu="h100-sxm", model="llama-3.1-8b"), Requirements(), CATALOG, TODAY)


def test_the_warning_reaches_the_decision() -> None:
    # 50,000 tok/s on one H100 SXM at the catalog's median $3.99: 3.99e6 / (3600 * 50,000) = $0.0222 per 1M
    d = _given(50_000)
    assert any(
        w.startswith("self-hosted given: self-hosted $0.0222 per 1M output tokens is below $0.05") for w in d.warnings
    ), d.warnings
    fine = _given(3_000)
    assert not any(WHY in w for w in fine.warnings)


def test_a_measured_level_at_high_concurrency_is_judged_with_its_concurrency() -> None:
    # 100 tok/s at c32 on one H100 at $3.99: 3.99e6 / 360,000 = $11.08 per 1M output tokens
    level = MeasuredLevel(label="c32", load=32, request_per_s=100 / 128, output_tokens_per_s=100,
                          input_tokens_per_s=200, slo_attainment=1.0, mean_input_tokens=256, mean_output_tokens=128)
    d = decide(
        [EngineLevels("slow", (level,))],
        LatencyLimits(),
        Traffic(monthly_tokens=3e9),
        Pricing(gpu="h100-sxm", model="llama-3.1-8b"),
        Requirements(),
        CATALOG,
        TODAY,
    )
    assert any(
        w.startswith("slow c32: self-hosted $11.1 per 1M output tokens at 32 concurrent requests is above $5")
        for w in d.warnings
    ), d.warnings


def _slow_decision(label: str, kind: str) -> object:
    # The figures of the test above: $11.1 per 1M output tokens at a load of 32
    level = MeasuredLevel(label=label, load=32, request_per_s=100 / 128, output_tokens_per_s=100,
                          input_tokens_per_s=200, slo_attainment=1.0, mean_input_tokens=256, mean_output_tokens=128,
                          kind=kind)  # type: ignore[arg-type]
    return decide([EngineLevels("slow", (level,))], LatencyLimits(), Traffic(monthly_tokens=3e9),
                  Pricing(gpu="h100-sxm", model="llama-3.1-8b"), Requirements(), CATALOG, TODAY)


@pytest.mark.parametrize(("label", "kind", "is_concurrency"), [
    ("capacity", "rate", False),  # a rate search's repeated capacity: 32 requests/s, not 32 users
    ("c32", "rate", False),  # a label is a name, not a kind
    ("capacity", "concurrency", True),
    ("x32", "concurrency", True),
])
def test_the_load_is_read_as_a_concurrency_by_the_level_s_kind_not_its_label(label: str, kind: str,
                                                                             is_concurrency: bool) -> None:
    d = _slow_decision(label, kind)
    said = [w for w in d.warnings if "concurrent requests" in w]  # type: ignore[attr-defined]
    assert bool(said) == is_concurrency, d.warnings  # type: ignore[attr-defined]
    if is_concurrency:
        assert said[0].startswith(f"slow {label}: self-hosted $11.1 per 1M output tokens at 32 concurrent requests")
