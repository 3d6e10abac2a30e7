"""The engine itself: a paged KV cache, a scheduler over it, a Llama model and one synchronous `step()`.

Nothing here knows of HTTP, asyncio or Prometheus. Only `engine.py` (a model spec to weights and a
tokenizer) and `request_state.py` (streaming detokenization) use `loading`; the rest never loads anything.
"""
