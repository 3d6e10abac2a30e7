"""The memory plan beside a run's measurements (bench.flows.report_plan), worked by hand, and in a real report.

dummy:llama-3.1-8b on one H100 SXM (80 GB, 3.35 TB/s) at 0.9, bf16 (the figures of tests/costmodel/test_plan.py):
weights 16,060,522,496 bytes, KV 131,072 bytes per token, 426,784 KV tokens fit. A level with 1,000 input and 24
output tokens a request: sequences of 1,024 tokens, 426,784 // 1,024 = 416 of them fit. At 8 in flight (7.8
rounded) one decode step reads 16,060,522,496 + 8 x 1,024 x 131,072 = 17,134,264,320 bytes / 3.35e12 B/s =
5.11471 ms -> 8 / 5.11471e-3 = 1,564.12 output tokens/s at most; 1,000 measured is 1,000 / 1,564.12 = 63.93 % of it.
Its KV: 8 x 1,024 / 426,784 = 1.92 % of the cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench.flows.report_plan import NO_GPU, catalog_gpu, memory_plan
from bench.run.enginelog import read_engine_log
from bench.run.rundir import Run
from bench.run.runinfo import EngineDetails, EngineRecord, GpuRecord, HostRecord, RunInfo
from engines.engine_file import EngineFile
from loadgen.types import Distribution, GpuView, Latency, LevelSummary, RequestCounts, ServerView, Throughput, Tokens
from reports.inputs import NoPlan, RunPlan
from tests.gpu.conftest import STANDIN

H100_NAME = "NVIDIA H100 80GB HBM3"


def level(label: str, in_flight: float, output_tokens_per_s: float) -> LevelSummary:
    return LevelSummary(
        engine="reference", level=label, kind="concurrency", target=8,
        requests=RequestCounts(num_requests=100, num_ok=100, num_failed=0, failure_rate=0.0, failures_by_kind={}),
        throughput=Throughput(window_s=10.0, is_steady_window=True, request_per_s=1.0,
                              output_tokens_per_s=output_tokens_per_s, total_tokens_per_s=output_tokens_per_s,
                              run_request_per_s=1.0, run_output_tokens_per_s=output_tokens_per_s,
                              goodput_request_per_s=1.0, slo_attainment=1.0, mean_in_flight=in_flight),
        latency=Latency(ttft_ms=Distribution(), itl_ms=Distribution(), icl_ms=Distribution(), tpot_ms=Distribution(),
                        e2e_ms=Distribution()),
        tokens=Tokens(mean_input_tokens=1000, mean_output_tokens=24),
    )


def run_of(
    tmp_path: Path,
    engine: str = "reference",
    gpus: tuple[str, ...] | None = (H100_NAME,),
    summaries: tuple[LevelSummary, ...] = (),
    launched_by: str = "bench",
    **views: Any,
) -> Run:
    """A run directory of the engine launched here with dummy:llama-3.1-8b, as read."""
    details = EngineDetails(model_argument="dummy:llama-3.1-8b" if engine == "reference" else None)
    info = RunInfo(
        run_id="r",
        engine=EngineRecord(name=engine, launched_by=launched_by, details=details),
        engine_spec=EngineFile(engine=engine, model="dummy:llama-3.1-8b", tensor_parallel_size=1),
        hardware=HostRecord(gpus=[GpuRecord(name=n) for n in gpus or ()] if gpus is not None else None),
    )
    summaries = summaries or (level("c8", 7.8, 1000.0),)
    return Run(tmp_path, info, summaries, finished=tuple(s.level for s in summaries), **views)


def test_the_share_of_the_ceiling_is_the_hand_figure(tmp_path: Path) -> None:
    views = (ServerView("c8", 10, 7.8, 0.0, 0.03, 0.0, None),)
    plan = memory_plan(run_of(tmp_path, server_views=views))
    assert isinstance(plan, RunPlan)
    assert (plan.gpu, plan.gpus_recorded, plan.context_tokens) == ("h100-sxm", H100_NAME, 1024)
    assert plan.weights_gb == pytest.approx(16.060522496)
    assert (plan.kv_bytes_per_token, plan.kv_tokens_that_fit, plan.sequences_that_fit) == (131072, 426784, 416)
    (c8,) = plan.levels
    assert (c8.label, c8.batch_size, c8.is_capped) == ("c8", 8, False)
    assert c8.decode_step_floor_ms == pytest.approx(5.11471, abs=1e-5)
    assert c8.ceiling_tokens_per_s == pytest.approx(1564.12, abs=0.01)
    assert c8.share_of_ceiling == pytest.approx(0.6393, abs=1e-4)
    assert c8.plan_kv_usage == pytest.approx(8 * 1024 / 426784)
    assert c8.engine_kv_usage_max == 0.03
    kv = plan.engine_kv
    assert kv.capacity_tokens is None and kv.source.startswith("not published: the reference engine's /metrics")


def test_more_in_flight_than_fit_is_planned_at_all_that_fit(tmp_path: Path) -> None:
    plan = memory_plan(run_of(tmp_path, summaries=(level("c512", 512, 2000.0),)))
    assert isinstance(plan, RunPlan)
    (c512,) = plan.levels
    assert (c512.batch_size, c512.is_capped) == (416, True)
    assert c512.plan_kv_usage <= 1


def test_a_run_on_a_cpu_has_no_plan_and_says_why(tmp_path: Path) -> None:
    assert memory_plan(run_of(tmp_path, gpus=())) == NoPlan(NO_GPU)
    assert NO_GPU == "measured without a GPU: no bandwidth ceiling to compare with"


def test_the_gpus_come_from_the_readings_when_run_json_lists_none(tmp_path: Path) -> None:
    view = GpuView("c8", 3, 1, (H100_NAME,), 300.0, 310.0, 80.0, 1000.0, 1980.0, 60.0)
    plan = memory_plan(run_of(tmp_path, gpus=(), gpu_views=(view,)))
    assert isinstance(plan, RunPlan) and plan.gpus_recorded == H100_NAME


def test_an_endpoint_the_user_ran_gets_no_plan_and_an_unknown_model_says_why(tmp_path: Path) -> None:
    assert memory_plan(run_of(tmp_path, launched_by="user")) is None
    info = RunInfo(
        run_id="r",
        engine=EngineRecord(name="vllm", launched_by="bench"),
        engine_spec=EngineFile(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct"),
        hardware=HostRecord(gpus=[GpuRecord(name=H100_NAME)]),
    )
    plan = memory_plan(replace(run_of(tmp_path, engine="vllm"), info=info))
    assert isinstance(plan, NoPlan)
    assert plan.why_not.startswith("the model could not be read for a plan (--model meta-llama")


@pytest.mark.parametrize(
    ("name", "key"),
    [
        (H100_NAME, "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA A10G", "a10g"),
    ],
)
def test_gpu_names_as_nvidia_smi_gives_them_map_to_the_catalog(name: str, key: str | None) -> None:
    assert catalog_gpu(name) == key


def test_vllms_kv_cache_size_in_its_log_is_the_engines_capacity(tmp_path: Path) -> None:
    (tmp_path / "engine.log").write_text(
        "INFO 05-06 12:00:01 [gpu_worker.py:227] Available KV cache memory: 50.26 GiB\n"
        "INFO 05-06 12:00:01 [kv_cache_utils.py:716] GPU KV cache size: 411,728 tokens\n"
        "INFO 05-06 12:00:01 [kv_cache_utils.py:720] Maximum concurrency for 131,072 tokens per request: 3.14x\n"
    )
    plan = memory_plan(run_of(tmp_path, engine="vllm", engine_log=read_engine_log(tmp_path / "engine.log")))
    assert isinstance(plan, RunPlan)
    kv = plan.engine_kv
    assert (kv.capacity_tokens, kv.plan_tokens) == (411728, 426784)
    assert kv.ratio_to_plan == pytest.approx(411728 / 426784)
    assert "GPU KV cache size" in kv.source


def test_a_swept_reference_engine_on_the_stand_in_h100_reports_its_plan(tmp_path: Path) -> None:
    """A real sweep under the nvidia-smi stand-in: report.json carries the plan, report.md shows it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f'#!/bin/sh\nexec {sys.executable} {STANDIN} "$@"\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    out = tmp_path / "runs"
    args = "sweep --model dummy:tiny --concurrency 1,2 --duration 1.5 --input-tokens 16 --output-tokens 8".split()
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    result = subprocess.run(
        [sys.executable, "-m", "bench", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PATH": path},
    )
    assert result.returncode == 0, result.stderr
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith('.')]
    plan = json.loads((run_dir / "report.json").read_text())["engines"][0]["plan"]
    assert (plan["model"], plan["gpu"], plan["gpus_recorded"]) == ("dummy:tiny", "h100-sxm", H100_NAME)
    summary = {row["level"]: row for row in json.loads((run_dir / "summary.json").read_text())}
    assert [lv["label"] for lv in plan["levels"]] == ["c1", "c2"]
    for lv in plan["levels"]:
        measured = summary[lv["label"]]["output_tokens_per_s"]
        assert lv["measured_output_tokens_per_s"] == pytest.approx(measured)
        assert lv["share_of_ceiling"] == pytest.approx(measured / lv["ceiling_tokens_per_s"])
    assert plan["engine_kv"]["capacity_tokens"] is None
    md = (run_dir / "report.md").read_text()
    assert "**Memory plan beside the measurements** (`bench plan`: dummy:tiny on 1 x h100-sxm" in md
    assert "| Level | In flight | Batch | Step floor ms | Ceiling tok/s |" in md
    assert "Memory plan beside the measurements" in (run_dir / "report.html").read_text()


@pytest.mark.parametrize(("spec", "model", "precision"), [
    (EngineFile(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct", quantization="fp8"), None, "fp8"),
    (EngineFile(engine="reference", model="default", args={"weights-dtype": "bf16", "dtype": "float32"}), None, "bf16"),
    (EngineFile(engine="reference", model="default"), "/x/SmolLM2-135M-Instruct.Q4_1.gguf", "q4_1"),
    (EngineFile(engine="vllm", model="m", args={"dtype": "bfloat16"}), None, "bf16"),
    (EngineFile(engine="reference", model="default", args={"weights-dtype": "auto"}), None, None),
])
def test_a_runs_precision_is_what_its_engine_was_told_else_its_gguf_file(
        tmp_path: Path, spec: EngineFile, model: str | None, precision: str | None) -> None:
    run = run_of(tmp_path)
    info = replace(run.info, engine_spec=spec, engine=replace(run.info.engine, model=model))
    assert replace(run, info=info).precision == precision
