"""The memory and bandwidth arithmetic of serving one Llama-shaped model on one kind of GPU, before measuring.

From a model's shape, a GPU, a weights dtype, a tensor-parallel size and a context length: the weight bytes,
the KV bytes per token, how many full-context sequences the KV cache holds, and the memory-bound floor of one
decode step at each batch size (hence a ceiling on output tokens/s). Pure: the records it starts from are
`costmodel.plan_shapes`', reading a model file into one is `bench.inputs.model_shape`'s job, and it knows no engine.
The KV cache is sized as vLLM sizes it: a share of the GPU's memory (`memory_fraction`, its
gpu-memory-utilization) less the weights.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from costmodel.plan_shapes import (
    DTYPE_BYTES,
    KV_DTYPES,
    GpuShape,
    ModelShape,
    PlanError,
    dtype_name,
    valid_tensor_parallel_sizes,
)

DEFAULT_BATCHES = (1, 8, 32, 128)
DEFAULT_MEMORY_FRACTION = 0.9  # vLLM's default gpu-memory-utilization


@dataclass(frozen=True)
class PlanInputs:
    """What a plan is for. `dtype` None: what the model file holds (bfloat16 when it does not say);
    `context_tokens` None: the model's own; `kv_tokens_read` None: the full context (the worst case)."""

    model: ModelShape
    gpu: GpuShape
    dtype: str | None = None
    kv_dtype: str = "bfloat16"
    tensor_parallel_size: int = 1
    context_tokens: int | None = None
    memory_fraction: float = DEFAULT_MEMORY_FRACTION
    kv_tokens_read: int | None = None

    def __post_init__(self) -> None:
        # Aliases (bf16, fp16) become the canonical names, so every output spells a dtype one way.
        if self.dtype is not None:
            object.__setattr__(self, "dtype", dtype_name("--dtype", self.dtype, tuple(DTYPE_BYTES)))
        object.__setattr__(self, "kv_dtype", dtype_name("--kv-dtype", self.kv_dtype, KV_DTYPES))
        valid = valid_tensor_parallel_sizes(self.model)
        if self.tensor_parallel_size not in valid:
            raise PlanError(
                f"--tensor-parallel-size {self.tensor_parallel_size}: {self.model.name}'s "
                f"{self.model.num_heads} attention heads and {self.model.num_kv_heads} KV heads do not "
                f"split over that many GPUs; accepted: {', '.join(map(str, valid))}"
            )
        if not 0 < self.memory_fraction <= 1:
            raise PlanError(f"--memory-fraction {self.memory_fraction:g}: expected a share in (0, 1], e.g. 0.9")
        limit = self.model.max_context_tokens
        if self.context_tokens is not None and not 1 <= self.context_tokens <= limit:
            raise PlanError(
                f"--context {self.context_tokens}: expected 1 to {self.model.name}'s own context of {limit} tokens"
            )
        if self.kv_tokens_read is not None and not 1 <= self.kv_tokens_read <= self.context:
            raise PlanError(
                f"--kv-tokens-read {self.kv_tokens_read}: expected 1 to the context ({self.context} tokens)"
            )

    @property
    def context(self) -> int:
        return self.context_tokens or self.model.max_context_tokens

    @property
    def tokens_read(self) -> int:
        return self.kv_tokens_read or self.context


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes of one replica: `_per_gpu` figures are one of its `tensor_parallel_size` GPUs."""

    num_params: int
    weights_dtype: str
    weights_bytes: int
    weights_bytes_per_gpu: int
    kv_heads_per_gpu: int
    kv_bytes_per_token: int
    kv_bytes_per_token_per_gpu: int
    usable_bytes_per_gpu: int  # memory_gb x memory_fraction
    kv_cache_bytes_per_gpu: int  # negative when the weights alone do not fit
    kv_tokens_that_fit: int
    sequences_that_fit: int


@dataclass(frozen=True)
class DecodeCeiling:
    """One decode step at `batch_size`, bound by memory bandwidth: every weight and every sequence's
    `kv_tokens_read` KV tokens read once."""

    batch_size: int
    bytes_read_per_step_per_gpu: int
    decode_step_floor_ms: float
    tokens_per_s_per_user_ceiling: float
    tokens_per_s_total_ceiling: float


@dataclass(frozen=True)
class Plan:
    inputs: PlanInputs
    memory: MemoryPlan
    ceilings: tuple[DecodeCeiling, ...]
    batches_left_out: tuple[int, ...] = field(default=())  # asked for, but more sequences than fit

    def to_json(self) -> dict[str, object]:
        """Every figure, its unit in its key."""
        inputs, gpu = self.inputs, self.inputs.gpu
        return {
            "model": inputs.model.name,
            "gpu": gpu.name,
            "gpu_memory_gb": gpu.memory_gb,
            "gpu_bandwidth_tb_s": gpu.bandwidth_tb_s,
            "tensor_parallel_size": inputs.tensor_parallel_size,
            "context_tokens": inputs.context,
            "kv_tokens_read": inputs.tokens_read,
            "memory_fraction": inputs.memory_fraction,
            "kv_dtype": inputs.kv_dtype,
            **dataclasses.asdict(self.memory),
            "kv_bytes_per_sequence_per_gpu": inputs.context * self.memory.kv_bytes_per_token_per_gpu,
            "decode": [dataclasses.asdict(c) for c in self.ceilings],
            "batches_left_out": list(self.batches_left_out),
            "assumptions": assumptions(self),
        }


def assumptions(plan: Plan) -> list[str]:
    """What each figure assumes, in words."""
    inputs = plan.inputs
    read = "the full context, the worst case" if inputs.kv_tokens_read is None else "--kv-tokens-read"
    lines = [
        f"KV cache: {inputs.memory_fraction:g} of the GPU's memory (--memory-fraction, like vLLM's "
        "gpu-memory-utilization) less the weights; activations, CUDA graphs and fragmentation are assumed to fit "
        "in the rest",
        "decode step floor: memory-bound, each step reads every weight once and each sequence's KV "
        f"({inputs.tokens_read:,} tokens: {read}) at the GPU's full bandwidth; compute, attention kernels' "
        "efficiency and the scheduler ignored, so real steps are slower and tokens/s are ceilings",
    ]
    if inputs.tensor_parallel_size > 1:
        lines.append(
            f"tensor parallel over {inputs.tensor_parallel_size} GPUs: weights and KV heads split evenly, "
            "the all-reduce between GPUs ignored"
        )
    if plan.batches_left_out:
        lines.append(
            f"batch {', '.join(map(str, plan.batches_left_out))} left out: only "
            f"{plan.memory.sequences_that_fit} sequences of {inputs.context:,} tokens fit"
        )
    return lines


def plan_memory(inputs: PlanInputs) -> MemoryPlan:
    """The bytes, whether or not they fit (a negative KV cache when the weights alone do not)."""
    model, tp = inputs.model, inputs.tensor_parallel_size
    dtype, weights = _weights(inputs)
    kv_heads_per_gpu = max(1, model.num_kv_heads // tp)  # below one head per GPU, vLLM replicates them
    kv_bytes = int(DTYPE_BYTES[inputs.kv_dtype])
    per_token = model.num_layers * model.num_kv_heads * model.head_dim * 2 * kv_bytes  # K and V
    per_token_per_gpu = model.num_layers * kv_heads_per_gpu * model.head_dim * 2 * kv_bytes
    weights_per_gpu = -(-weights // tp)  # rounded up; norms are replicated, a few KB
    usable = round(inputs.gpu.memory_gb * 1e9 * inputs.memory_fraction)
    cache = usable - weights_per_gpu
    tokens = max(cache, 0) // per_token_per_gpu
    return MemoryPlan(
        num_params=model.num_params,
        weights_dtype=dtype,
        weights_bytes=weights,
        weights_bytes_per_gpu=weights_per_gpu,
        kv_heads_per_gpu=kv_heads_per_gpu,
        kv_bytes_per_token=per_token,
        kv_bytes_per_token_per_gpu=per_token_per_gpu,
        usable_bytes_per_gpu=usable,
        kv_cache_bytes_per_gpu=cache,
        kv_tokens_that_fit=tokens,
        sequences_that_fit=tokens // inputs.context,
    )


def decode_ceiling(inputs: PlanInputs, memory: MemoryPlan, batch_size: int) -> DecodeCeiling:
    read = memory.weights_bytes_per_gpu + batch_size * inputs.tokens_read * memory.kv_bytes_per_token_per_gpu
    step_s = read / (inputs.gpu.bandwidth_tb_s * 1e12)
    return DecodeCeiling(batch_size, read, step_s * 1e3, 1 / step_s, batch_size / step_s)


def make_plan(inputs: PlanInputs, batches: tuple[int, ...] | None = None) -> Plan:
    """The plan at each batch size that fits (default 1, 8, 32, 128 and the most that fit); PlanError naming
    what would help when not one sequence of the context fits."""
    memory = plan_memory(inputs)
    most = memory.sequences_that_fit
    if most < 1:
        raise PlanError(does_not_fit(inputs, memory))
    wanted = sorted(set(batches if batches is not None else (*DEFAULT_BATCHES, most)))
    ceilings = tuple(decode_ceiling(inputs, memory, b) for b in wanted if b <= most)
    return Plan(inputs, memory, ceilings, tuple(b for b in wanted if b > most))


def does_not_fit(inputs: PlanInputs, memory: MemoryPlan) -> str:
    gpu, fraction = inputs.gpu, inputs.memory_fraction
    if memory.kv_cache_bytes_per_gpu <= 0:
        what = (
            f"{inputs.model.name} in {memory.weights_dtype} is {gb(memory.weights_bytes_per_gpu)} of weights per "
            f"GPU, more than the {gb(memory.usable_bytes_per_gpu)} the engine may use ({fraction:g} x "
            f"{gpu.memory_gb:g} GB of one {gpu.name}, --memory-fraction)"
        )
    else:
        what = (
            f"after {gb(memory.weights_bytes_per_gpu)} of weights per GPU, {gb(memory.kv_cache_bytes_per_gpu)} "
            f"are left for the KV cache, less than one {inputs.context}-token sequence needs "
            f"({gb(inputs.context * memory.kv_bytes_per_token_per_gpu)})"
        )
    helps = _what_would_help(inputs, memory)
    return f"does not fit: {what}; would help: {', or '.join(helps) if helps else 'a GPU with more memory'}"


def _what_would_help(inputs: PlanInputs, memory: MemoryPlan) -> list[str]:
    def fits(**changes: Any) -> bool:
        try:
            return plan_memory(dataclasses.replace(inputs, **changes)).sequences_that_fit >= 1
        except PlanError:
            return False

    helps = []
    larger = [t for t in valid_tensor_parallel_sizes(inputs.model) if t > inputs.tensor_parallel_size]
    tp = next((t for t in larger if fits(tensor_parallel_size=t)), None)
    if tp is not None:
        helps.append(f"--tensor-parallel-size {tp}")
    per_param = memory.weights_bytes / memory.num_params
    dtype = next((d for d, b in DTYPE_BYTES.items() if b < per_param and fits(dtype=d)), None)
    if dtype is not None:
        helps.append(f"--dtype {dtype}")
    if memory.kv_cache_bytes_per_gpu > 0:
        if DTYPE_BYTES[inputs.kv_dtype] > 1 and fits(kv_dtype="fp8"):
            helps.append("--kv-dtype fp8")
        if memory.kv_tokens_that_fit:
            helps.append(f"--context {memory.kv_tokens_that_fit} or less")
    return helps


def _weights(inputs: PlanInputs) -> tuple[str, int]:
    """(what the weights are stored as, their bytes): the dtype asked for, else what the file measured or says."""
    model = inputs.model
    if inputs.dtype is None and model.file_weights_bytes is not None:
        return model.file_dtype or "as in the file", model.file_weights_bytes
    dtype = inputs.dtype or (model.file_dtype if model.file_dtype in DTYPE_BYTES else "bfloat16")
    return dtype, math.ceil(model.num_params * DTYPE_BYTES[dtype])


def parse_batches(text: str) -> tuple[int, ...]:
    """'1,8,32' -> (1, 8, 32)."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise PlanError(f"--batch {text!r}: expected batch sizes >= 1 separated by commas, e.g. 1,8,32")
    return sizes


def gb(num_bytes: float) -> str:
    return f"{num_bytes / 1e9:,.2f} GB"
