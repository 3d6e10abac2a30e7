"""The report's title names what was priced and, when the run measured something else (a small model on a CPU
priced as an 8B model on an H100), what was measured: an illustration says it is one."""

from __future__ import annotations

from pathlib import Path

from reports.data import _measured_otherwise
from reports.inputs import ReportRun, RunProvenance


def run(model: str, gpu_names: tuple[str, ...] | None, launched_by: str = "bench") -> ReportRun:
    return ReportRun(run_dir=Path("r"), label="reference 0.1.0", status="complete", summaries=(), kind="concurrency",
                     launched_by=launched_by, gpu_names=gpu_names,
                     provenance=RunProvenance(engine={"model": model}))


def test_a_small_model_on_a_cpu_is_named_beside_what_is_priced() -> None:
    said = _measured_otherwise(run("SmolLM2-135M-Instruct.Q4_1", ()), "llama-3.1-8b", "h100-sxm")
    assert said == "SmolLM2-135M-Instruct.Q4_1 measured on CPU"


def test_the_model_priced_on_the_gpu_priced_says_nothing_more() -> None:
    assert _measured_otherwise(run("Llama-3.1-8B-Instruct", ("NVIDIA H100 80GB HBM3",)), "llama-3.1-8b",
                               "h100-sxm") is None
    other_gpu = _measured_otherwise(run("Llama-3.1-8B-Instruct", ("NVIDIA A10G",)), "llama-3.1-8b", "h100-sxm")
    assert other_gpu == "Llama-3.1-8B-Instruct measured on NVIDIA A10G"
    assert _measured_otherwise(run("x", (), launched_by="user"), "llama-3.1-8b", "h100-sxm") is None  # can't tell


def test_the_verdict_says_first_what_was_measured_when_it_is_not_what_is_priced() -> None:
    from datetime import date

    from costmodel.decide import decide_given
    from costmodel.inputs import Pricing, Requirements, Traffic
    from costmodel.prices import load_catalog
    from reports.data import report_verdict

    decision = decide_given(2400, 256, 128, Traffic(monthly_tokens=3e9), Pricing(gpu="h100-sxm", model="llama-3.1-8b"),
                            Requirements(), load_catalog(), date(2026, 12, 3))
    small = report_verdict(decision, "llama-3.1-8b", "h100-sxm", [run("SmolLM2-135M-Instruct.Q4_1", ())])
    assert small.headline == decision.verdict.headline and small.lines[1:] == decision.verdict.lines
    assert small.lines[0] == ("SmolLM2-135M-Instruct.Q4_1 measured on CPU, priced as llama-3.1-8b on h100-sxm: the "
                              "figures show the method on this machine; measure llama-3.1-8b on h100-sxm itself "
                              "before deciding.")
    same = report_verdict(decision, "llama-3.1-8b", "h100-sxm", [run("Llama-3.1-8B-Instruct", ("NVIDIA H100 80GB",))])
    assert same == decision.verdict
