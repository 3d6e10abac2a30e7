"""Other tools' saved results read as levels (`bench import`): one reader per tool, each from the tool's
documented fields. Only vLLM's is written so far; guidellm and aiperf are refused by name."""

from __future__ import annotations

from bench.imports.vllm import ImportedLevel, ImportFileError, read_vllm

READERS = {"vllm": read_vllm}
PLANNED = ("guidellm", "aiperf")  # issue 31: their readers are not written yet

__all__ = ["PLANNED", "READERS", "ImportFileError", "ImportedLevel", "read_vllm"]
