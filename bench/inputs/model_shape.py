"""A `--model` argument -> the plan's `ModelShape`: a GGUF file, a Hugging Face directory (or its config.json),
`dummy:<preset>` or `default`.

Reads metadata and tensor sizes, never the weights. The presets, `default` and the metadata readers are the
reference engine's own, so a plan describes the model that engine would serve. Lives in `bench` because
`costmodel` imports no engine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from costmodel.plan_shapes import DTYPE_BYTES, ModelShape, PlanError


def model_shape(spec: str) -> ModelShape:
    from engines.reference.loading.weights import DUMMY_PRESETS, resolve_default

    spec = resolve_default(spec)  # as the reference engine resolves `default`
    if spec.startswith("dummy:"):
        preset = spec.removeprefix("dummy:")
        if preset not in DUMMY_PRESETS:
            raise PlanError(f"--model {spec}: unknown preset (accepted: dummy:{', dummy:'.join(DUMMY_PRESETS)})")
        return _from_config(spec, DUMMY_PRESETS[preset])
    path = Path(spec)
    if path.is_file() and path.suffix == ".gguf":
        return _gguf_shape(path)
    if (path / "config.json").is_file() or (path.is_file() and path.name == "config.json"):
        return _config_json_shape(path if path.is_file() else path / "config.json")
    raise PlanError(
        f"--model {spec}: not found; expected a .gguf file, a directory with config.json (or the "
        f"file itself), dummy:<{'|'.join(DUMMY_PRESETS)}> or default"
    )


def _from_config(name: str, config: Any, **extra: Any) -> ModelShape:
    """ModelShape from the reference engine's ModelConfig."""
    return ModelShape(
        name,
        config.num_layers,
        config.num_heads,
        config.num_kv_heads,
        config.head_dim,
        config.hidden_size,
        config.intermediate_size,
        config.vocab_size,
        config.max_position_embeddings,
        config.tie_word_embeddings,
        **extra,
    )


def _gguf_shape(path: Path) -> ModelShape:
    """The shape from the llama.* metadata; the weight bytes as the file holds them (quantized)."""
    from engines.reference.loading.gguf_file import gguf_model_config, open_gguf

    try:
        reader = open_gguf(path)
        config = gguf_model_config(reader)
    except (ValueError, OSError) as exc:
        raise PlanError(f"--model {path}: {exc}") from None
    by_type: dict[str, int] = {}
    for tensor in reader.tensors:
        by_type[tensor.tensor_type.name] = by_type.get(tensor.tensor_type.name, 0) + int(tensor.n_bytes)
    types = " + ".join(sorted(by_type, key=by_type.__getitem__, reverse=True))
    return _from_config(path.stem, config, file_weights_bytes=sum(by_type.values()), file_dtype=f"GGUF {types}")


def _config_json_shape(path: Path) -> ModelShape:
    """The shape from a Hugging Face Llama config.json; the dtype from its torch_dtype (dtype in transformers 5)."""
    from engines.reference.loading.weights import hf_model_config

    try:
        raw = json.loads(path.read_text())
        config = hf_model_config(raw)
    except KeyError as exc:
        raise PlanError(f"--model {path}: config.json lacks {exc.args[0]}") from None
    except (ValueError, OSError, AttributeError) as exc:
        raise PlanError(f"--model {path}: {exc}") from None
    dtype = raw.get("torch_dtype") or raw.get("dtype")
    return _from_config(path.parent.name, config, file_dtype=dtype if dtype in DTYPE_BYTES else None)
