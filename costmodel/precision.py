"""The precision the weights are served in, self-hosted and at a host: the same model in fp8 and in bf16 is not
the same product, so a price compared across precisions says so.

A host's precision is what its listing states (`quantization` in the provider catalog; blank: it does not say).
The self-hosted one is the engine's stated dtype or quantization (`bench cost --precision`, or the run's engine
arguments); `auto` states nothing.
"""

from __future__ import annotations

from costmodel.types import ProviderCost

ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
           "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "e4m3": "fp8"}
UNSTATED = {"", "auto", "none"}


def normalized(precision: str | None) -> str | None:
    """`bfloat16` -> `bf16`, `FP8` -> `fp8`; None for a precision that states nothing (`auto`)."""
    if precision is None:
        return None
    name = precision.strip().lower()
    return None if name in UNSTATED else ALIASES.get(name, name)


def precision_warning(self_hosted: str | None, compared: ProviderCost | None) -> str | None:
    """What a reader must know when the compared host serves another precision than the self-hosted model, or
    states one while the self-hosted model does not; None when they agree or the host does not say."""
    host = normalized(compared.quantization) if compared else None
    if compared is None or host is None:
        return None
    ours = normalized(self_hosted)
    measure = "`bench quality` with both engines measures whether the answers differ"
    if ours is None:
        return (f"{compared.id} serves {host} weights; the self-hosted precision is not stated (--precision, or the "
                f"engine's dtype or quantization): {measure}")
    if ours != host:
        return (f"{compared.id} serves {host} weights, the self-hosted model runs {ours}: not the same product; "
                f"{measure}")
    return None
