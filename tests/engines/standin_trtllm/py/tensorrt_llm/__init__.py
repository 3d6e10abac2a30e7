"""A stand-in for TensorRT-LLM's LLM API, enough for the build step as `engines.trtllm` drives it: the
real one needs an NVIDIA GPU and NGC's image, neither of which this machine has. `LLM(...).save(dir)`
writes an engine folder as the real one does (config.json with the build's settings, one engine file per
rank); `quant_config` with an algorithm it does not know fails as the real build does."""

from tensorrt_llm._tensorrt_engine import LLM

__all__ = ["LLM"]
