"""The memory plan of a run, beside what it measured: the figures `bench plan` gives for the run's model and GPU,
each measured level's output tokens/s as a share of the plan's memory-bound ceiling, and the engine's own KV
capacity (as its log states it) beside the plan's.

A `reports.inputs.RunPlan` for `ReportRun.plan` (reports' own record: reports may not import bench); when no plan
can be made, a `NoPlan` saying why. An endpoint the user ran gets none: the run does not know its
hardware. What the GPUs are is read from run.json, else from the GPU readings taken while it ran.
"""

from __future__ import annotations

import math
import re

from bench.run.enginelog import EngineLogFacts
from bench.run.rundir import Run
from bench.run.runinfo import RunInfo
from costmodel.plan import DEFAULT_MEMORY_FRACTION, Plan, PlanInputs, assumptions, decode_ceiling, make_plan
from costmodel.plan_shapes import DTYPE_BYTES, GpuShape, PlanError, resolve_gpu
from engines.engine_file import EngineFile
from loadgen.types import LevelSummary
from reports.inputs import EngineKv, NoPlan, PlanLevel, RunPlan

NO_GPU = "measured without a GPU: no bandwidth ceiling to compare with"

# nvidia-smi's (or NVML's) name of a GPU -> the catalog's key (costmodel/prices/hardware.yaml); the first
# pattern that matches wins, None: a part the catalog does not describe (its memory or bandwidth differ).
GPU_NAMES: tuple[tuple[str, str | None], ...] = (
    (r"\bh100\b.*\bnvl\b", None),
    (r"\bh100\b.*\bpcie\b", "h100-pcie"),
    (r"\bh100\b", "h100-sxm"),  # "NVIDIA H100 80GB HBM3" is the SXM part
    (r"\bh200\b", "h200"),
    (r"\ba100\b.*\b40\s*gb\b", "a100-40gb"),
    (r"\ba100\b", "a100-80gb"),
    (r"\bl40s\b", "l40s"),
    (r"\bl4\b", "l4"),
    (r"\ba10g?\b", "a10g"),
    (r"\b(rtx )?4090\b", "rtx-4090"),
    (r"\bb200\b", "b200"),
    (r"\bmi300x\b", "mi300x"),
)

def memory_plan(run: Run) -> RunPlan | NoPlan | None:
    """The plan block of one run; None for an endpoint the user ran."""
    if run.info.engine.launched_by != "bench":
        return None
    try:
        return _plan_block(run)
    except PlanError as exc:
        return NoPlan(str(exc))


def _plan_block(run: Run) -> RunPlan:
    from bench.inputs.model_shape import model_shape  # the reference engine's loaders, torch: only when planning

    info = run.info
    gpu, recorded = run_gpu(run)
    spec = model_spec(info)
    try:
        model = model_shape(spec)
    except PlanError as exc:
        raise PlanError(f"the model could not be read for a plan ({exc})") from None
    engine_spec = info.engine_spec or EngineFile(engine=info.engine.name)
    context, context_source = _context(run.summaries, engine_spec.max_model_len, model.max_context_tokens)
    # The weights' dtype where the engine was told one (a quantization such as fp8 is one); else the file's.
    dtype = str(engine_spec.args.get("dtype") or engine_spec.quantization or "").lower()
    inputs = PlanInputs(
        model=model,
        gpu=gpu,
        dtype=dtype if dtype in DTYPE_BYTES else None,
        tensor_parallel_size=engine_spec.tensor_parallel_size,
        context_tokens=context,
        memory_fraction=engine_spec.gpu_memory_fraction or DEFAULT_MEMORY_FRACTION,
    )
    replicas = engine_spec.replicas
    batches = {s.level: _batch(s, replicas) for s in run.summaries}
    plan = make_plan(inputs, tuple(sorted(set(batches.values()))))
    m = plan.memory
    return RunPlan(
        model=spec,
        gpu=gpu.name,
        gpus_recorded=recorded,
        gpu_memory_gb=gpu.memory_gb,
        gpu_bandwidth_tb_s=gpu.bandwidth_tb_s,
        tensor_parallel_size=inputs.tensor_parallel_size,
        replicas=replicas,
        memory_fraction=inputs.memory_fraction,
        context_tokens=context,
        context_source=context_source,
        weights_dtype=m.weights_dtype,
        weights_gb=m.weights_bytes / 1e9,
        kv_bytes_per_token=m.kv_bytes_per_token,
        kv_tokens_that_fit=m.kv_tokens_that_fit,
        sequences_that_fit=m.sequences_that_fit,
        engine_kv=engine_kv_capacity(run.engine_log, info.engine.name, m.kv_tokens_that_fit),
        levels=_levels(run, plan, batches, replicas),
        assumptions=(*assumptions(plan), _batch_assumption(replicas)),
    )


def run_gpu(run: Run) -> tuple[GpuShape, str]:
    """The catalog GPU the run was measured on, and the name it was recorded under; PlanError saying why not."""
    recorded_names = run.info.gpu_names
    names = [n for n in recorded_names or () if n]
    if not names:  # run.json may not say (nvidia-smi answered the readings, not the description): the readings do
        names = [n for view in run.gpu_views for n in view.names if n]
    if not names:
        raise PlanError(NO_GPU if recorded_names is not None or run.gpu_views else "the run does not record its GPUs")
    recorded = names[0]
    key = catalog_gpu(recorded)
    if key is None:
        raise PlanError(f"{recorded!r} is not in the GPU catalog (costmodel/prices/hardware.yaml): no bandwidth")
    return resolve_gpu(key), recorded


def catalog_gpu(name: str) -> str | None:
    """'NVIDIA H100 80GB HBM3' -> 'h100-sxm'; None for a GPU the catalog does not describe."""
    lowered = name.lower()
    for pattern, key in GPU_NAMES:
        if re.search(pattern, lowered):
            return key
    return None


def model_spec(info: RunInfo) -> str:
    """The `--model` the engine was launched with: what the plan reads."""
    spec_model = info.engine_spec.model if info.engine_spec else None
    return str(info.engine.details.model_argument or spec_model or info.engine.model or "default")


def _context(summaries: tuple[LevelSummary, ...], max_model_len: int | None, model_max: int) -> tuple[int, str]:
    """Tokens of one sequence: the longest mean request of the levels, else the engine's max_model_len."""
    longest = max(summaries, key=lambda s: s.tokens.mean_input_tokens + s.tokens.mean_output_tokens, default=None)
    if longest is not None and longest.tokens.mean_input_tokens + longest.tokens.mean_output_tokens >= 1:
        tokens = math.ceil(longest.tokens.mean_input_tokens + longest.tokens.mean_output_tokens)
        source = (
            f"the longest mean request of the levels ({longest.level}: {longest.tokens.mean_input_tokens:,.0f} "
            f"input + {longest.tokens.mean_output_tokens:,.0f} output tokens)"
        )
    elif max_model_len:
        tokens, source = int(max_model_len), "the engine's max_model_len"
    else:
        tokens, source = model_max, "the model's own context"
    if tokens > model_max:
        return model_max, f"{source}, capped at the model's own context"
    return tokens, source


def _batch(summary: LevelSummary, replicas: int) -> int:
    """The decode batch of one replica: the level's mean requests in flight, shared by the replicas."""
    return max(1, round(summary.throughput.mean_in_flight / replicas))


def _batch_assumption(replicas: int) -> str:
    per = f" divided among the {replicas} replicas, and the ceiling the replicas' sum" if replicas > 1 else ""
    return (
        f"batch: a level's mean requests in flight{per} (rounded, at most the sequences that fit); its share "
        "of the ceiling is the measured output tokens/s over the ceiling's, prefill time included"
    )


def _levels(run: Run, plan: Plan, batches: dict[str, int], replicas: int) -> tuple[PlanLevel, ...]:
    most = plan.memory.sequences_that_fit
    usage = {v.level: v.max_kv_cache_usage for v in run.server_views}
    rows = []
    for s in run.summaries:
        batch = min(batches[s.level], most)
        ceiling = decode_ceiling(plan.inputs, plan.memory, batch)
        total = ceiling.tokens_per_s_total_ceiling * replicas
        rows.append(
            PlanLevel(
                label=s.level,
                mean_in_flight=s.throughput.mean_in_flight,
                batch_size=batch,
                is_capped=batches[s.level] > most,
                decode_step_floor_ms=ceiling.decode_step_floor_ms,
                ceiling_tokens_per_s=total,
                measured_output_tokens_per_s=s.throughput.output_tokens_per_s,
                share_of_ceiling=s.throughput.output_tokens_per_s / total,
                plan_kv_usage=batch * plan.inputs.context / plan.memory.kv_tokens_that_fit,
                engine_kv_usage_max=usage.get(s.level),
            )
        )
    return tuple(rows)


def engine_kv_capacity(log: EngineLogFacts, engine: str, plan_tokens: int) -> EngineKv:
    """The KV capacity the engine itself states, beside the plan's; where it states none, what it does publish."""
    if log.kv_tokens is not None:
        return EngineKv(
            capacity_tokens=log.kv_tokens,
            plan_tokens=plan_tokens,
            ratio_to_plan=log.kv_tokens / plan_tokens,
            source=f"{log.kv_source} in engine.log",
        )
    if engine == "reference":
        source = (
            "not published: the reference engine's /metrics give its KV cache usage "
            "(vllm:kv_cache_usage_perc), not its capacity; the usage per level is beside the plan's"
        )
    elif log.exists:
        source = f"not published: {engine}'s engine.log states no KV cache size this report reads"
    else:
        source = "not published: the run has no engine.log"
    return EngineKv(capacity_tokens=None, plan_tokens=plan_tokens, ratio_to_plan=None, source=source)
