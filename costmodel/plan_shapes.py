"""What a plan is about: a Llama-shaped model's shape, a GPU's memory and bandwidth, and the dtypes' sizes.

Pure records and the checks on them; `costmodel.plan` does the arithmetic, `bench.inputs.model_shape` reads model files
into a `ModelShape`. The GPU figures come from the shipped catalog (`costmodel.hardware`) or from the user.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass

from costmodel.hardware import gpu_spec, shipped_hardware

# Bytes per parameter of the weights; int4 packs two parameters in a byte (scales ignored).
DTYPE_BYTES: dict[str, float] = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1, "int8": 1, "int4": 0.5}
KV_DTYPES = ("bfloat16", "float16", "float32", "fp8")
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}


class PlanError(ValueError):
    """A plan's input is wrong or the model does not fit; the message names the flag and what would be accepted."""


@dataclass(frozen=True)
class ModelShape:
    """A Llama-family decoder's shape; `file_weights_bytes` when a file says what its weights take (a GGUF's
    tensors, already quantized), `file_dtype` for what the file holds (a config.json's torch_dtype, a GGUF's
    tensor types)."""

    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    max_context_tokens: int
    tie_word_embeddings: bool = False
    file_weights_bytes: int | None = None
    file_dtype: str | None = None

    def __post_init__(self) -> None:
        for name in (f.name for f in dataclasses.fields(self) if f.type == "int"):  # the counts, not the bytes
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PlanError(f"model {self.name}: {name} must be an integer >= 1, got {value!r}")

    @property
    def num_params(self) -> int:
        """Embeddings, per layer q/k/v/o, gate/up/down and two norms, the final norm, and lm_head unless tied."""
        q, kv, h = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim, self.hidden_size
        per_layer = h * q + 2 * h * kv + q * h + 3 * h * self.intermediate_size + 2 * h
        embeddings = self.vocab_size * h
        return embeddings + self.num_layers * per_layer + h + (0 if self.tie_word_embeddings else embeddings)


@dataclass(frozen=True)
class GpuShape:
    name: str
    memory_gb: float
    bandwidth_tb_s: float


def valid_tensor_parallel_sizes(model: ModelShape) -> list[int]:
    """Sizes that split the attention heads evenly, and the KV heads evenly or into replicas (as vLLM does)."""
    kv = model.num_kv_heads
    return [t for t in range(1, model.num_heads + 1) if model.num_heads % t == 0 and (kv % t == 0 or t % kv == 0)]


def dtype_name(flag: str, value: str, accepted: tuple[str, ...]) -> str:
    """The canonical name of a dtype (bf16 -> bfloat16); PlanError naming `flag` when it is not `accepted`."""
    name = DTYPE_ALIASES.get(value.lower(), value.lower())
    if name not in accepted:
        raise PlanError(f"{flag} {value!r}: unknown; accepted: {', '.join(accepted)}")
    return name


def resolve_gpu(name: str | None, memory_gb: float | None = None, bandwidth_tb_s: float | None = None) -> GpuShape:
    """A catalog GPU (or alias), its memory or bandwidth replaced where given; or one the two figures describe."""
    for flag, value in (("--gpu-memory-gb", memory_gb), ("--bandwidth-tb-s", bandwidth_tb_s)):
        if value is not None and not value > 0:
            raise PlanError(f"{flag} {value:g}: expected a figure > 0")
    spec = gpu_spec(name)
    if spec is not None:
        return GpuShape(spec.gpu, memory_gb or spec.memory_gb, bandwidth_tb_s or spec.bandwidth_tb_s)
    if memory_gb is not None and bandwidth_tb_s is not None:
        return GpuShape(name or "custom GPU", memory_gb, bandwidth_tb_s)
    known = list(shipped_hardware())
    describe = "describe one with --gpu-memory-gb and --bandwidth-tb-s"
    if name is None:
        raise PlanError(f"--gpu: give a GPU name ({', '.join(known)}) or {describe}")
    close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.5)
    maybe = f" (did you mean {', '.join(close)}?)" if close else ""
    raise PlanError(f"--gpu {name!r}: unknown GPU{maybe}; known: {', '.join(known)}; or {describe}")
