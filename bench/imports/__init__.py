"""Other tools' saved results read as levels (`bench import`): one reader per tool, each from the tool's
documented fields, and the repeats among them labelled as a sweep's are (c8, c8#2, ...)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.imports.aiperf import read_aiperf
from bench.imports.common import ImportedLevel, ImportFileError
from bench.imports.guidellm import read_guidellm
from bench.imports.vllm import read_vllm

READERS: dict[str, Callable[[Path, str], list[ImportedLevel]]] = {
    "vllm": read_vllm, "guidellm": read_guidellm, "aiperf": read_aiperf}


def read_levels(tool: str, files: Sequence[Path], run_id: str = "imported",
                engine: str | None = None) -> list[ImportedLevel]:
    """Every level of every file, in order. A load met again (in another file, or twice in one) is a repeat of
    it: `c8`, then `c8#2`. `engine` names the engine where the files don't (or name it wrongly)."""
    if tool not in READERS:
        raise ImportFileError(f"--from {tool}: expected one of {', '.join(READERS)}")
    seen: Counter[str] = Counter()
    levels = []
    for path in files:
        for level in READERS[tool](path, run_id):
            seen[level.label] += 1
            label = level.label if seen[level.label] == 1 else f"{level.label}#{seen[level.label]}"
            levels.append(level.relabeled(label, engine))
    return levels


__all__ = ["READERS", "ImportFileError", "ImportedLevel", "read_levels"]
