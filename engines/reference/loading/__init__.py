"""Weights and tokenizers from GGUF files, safetensors directories or dummy presets, into the core's model.

Loading builds a `core.model.LlamaModel` and a `Tokenizer`; it knows nothing of scheduling, the KV cache
or serving.
"""
