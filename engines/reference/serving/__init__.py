"""The engine behind an OpenAI-compatible HTTP server: request parsing, the step thread, Prometheus metrics.

Serving talks to the core through `LLMEngine` (add_request / step / abort / stats); it never builds a
scheduler, a KV cache or a model of its own.
"""
