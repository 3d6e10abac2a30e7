"""What is priced and what was measured instead: a small model on a CPU priced as an 8B model on an H100 is an
illustration, and the verdict's first line says so; the same model on the GPU priced, or an endpoint the user ran
(its run can't tell), says nothing more."""

from __future__ import annotations

from dataclasses import fields
from datetime import date

from costmodel.decide import decide, decide_given
from costmodel.inputs import Pricing, Requirements, Traffic
from costmodel.prices import load_catalog
from costmodel.subject import measured_instead
from costmodel.types import (
    NOT_IN_FILES,
    Decision,
    EngineLevels,
    LatencyLimits,
    MeasuredLevel,
    MeasuredOn,
    Subject,
)

PRICING = Pricing(gpu="h100-sxm", model="llama-3.1-8b")
TODAY = date(2026, 12, 3)


def test_a_small_model_on_a_cpu_is_named_beside_what_is_priced() -> None:
    said = measured_instead(MeasuredOn("SmolLM2-135M-Instruct.Q4_1", ()), "reference 0.1.0", "llama-3.1-8b",
                            "h100-sxm")
    assert said == "SmolLM2-135M-Instruct.Q4_1 measured on CPU"


def test_the_model_priced_on_the_gpu_priced_says_nothing_more() -> None:
    h100 = MeasuredOn("Llama-3.1-8B-Instruct", ("NVIDIA H100 80GB HBM3",))
    assert measured_instead(h100, "reference 0.1.0", "llama-3.1-8b", "h100-sxm") is None
    a10 = MeasuredOn("Llama-3.1-8B-Instruct", ("NVIDIA A10G",))
    assert measured_instead(a10, "reference 0.1.0", "llama-3.1-8b", "h100-sxm") == ("Llama-3.1-8B-Instruct measured "
                                                                                    "on NVIDIA A10G")
    unnamed = MeasuredOn("", ())
    assert measured_instead(unnamed, "reference 0.1.0", "llama-3.1-8b", "h100-sxm") == ("reference 0.1.0 measured "
                                                                                        "on CPU")


def test_the_verdict_says_first_what_was_measured_when_it_is_not_what_is_priced() -> None:
    catalog = load_catalog()
    given = decide_given(2400, 256, 128, Traffic(monthly_tokens=3e9), PRICING, Requirements(), catalog, TODAY,
                         engine="reference 0.1.0")  # the same level, typed in: nothing was run

    def decision(ran: MeasuredOn | None) -> Decision:
        level = MeasuredLevel(label="given", load=0.0, request_per_s=2400 / 128, output_tokens_per_s=2400,
                              input_tokens_per_s=2400 / 128 * 256, mean_input_tokens=256, mean_output_tokens=128,
                              kind="given")
        return decide([EngineLevels("reference 0.1.0", (level,), measured_on=ran)], LatencyLimits(),
                      Traffic(monthly_tokens=3e9), PRICING, Requirements(), catalog, TODAY)

    plain = decision(None)  # an endpoint the user ran: its run can't tell
    assert plain.verdict == given.verdict and plain.subject.measured_instead is None
    small = decision(MeasuredOn("SmolLM2-135M-Instruct.Q4_1", ()))
    assert small.verdict.headline == plain.verdict.headline and small.verdict.lines[1:] == plain.verdict.lines
    assert small.verdict.lines[0] == ("SmolLM2-135M-Instruct.Q4_1 measured on CPU, priced as llama-3.1-8b on "
                                      "h100-sxm: the figures show the method on this machine; measure llama-3.1-8b "
                                      "on h100-sxm itself before deciding.")
    assert small.subject == Subject("llama-3.1-8b on h100-sxm", "SmolLM2-135M-Instruct.Q4_1 measured on CPU")
    assert decision(MeasuredOn("Llama-3.1-8B-Instruct", ("NVIDIA H100 80GB",))).verdict == plain.verdict


def test_the_subject_stays_out_of_the_files() -> None:
    """`bench cost --json` and report.json keep the keys they had: the subject is said in the verdict and title."""
    given = decide_given(2400, 256, 128, None, PRICING, Requirements(), load_catalog(), TODAY)
    assert given.subject.priced == "llama-3.1-8b on h100-sxm"
    assert next(f for f in fields(Decision) if f.name == "subject").metadata == NOT_IN_FILES
