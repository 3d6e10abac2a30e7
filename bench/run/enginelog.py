"""What a report takes from a run's engine.log: the KV capacity the engine states at start-up, and whether there
is a log at all. Read with the rest of the run (`rundir.read_run`), so a report opens no file of its own."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# An engine's own KV capacity, in tokens, as its log states it at start-up.
KV_LOG_LINES = (
    (re.compile(r"GPU KV cache size:\s*([\d,]+)\s*tokens"), "vLLM's log line 'GPU KV cache size: N tokens'"),
    (re.compile(r"max_total_num_tokens=(\d+)"), "SGLang's log line 'max_total_num_tokens=N'"),
)


@dataclass(frozen=True)
class EngineLogFacts:
    exists: bool  # the toolkit launched the engine and kept its output
    kv_tokens: int | None = None  # the KV capacity the log states, when it states one
    kv_source: str | None = None  # the line that stated it, in words


NO_LOG = EngineLogFacts(exists=False)


def read_engine_log(path: Path) -> EngineLogFacts:
    """The facts of one engine.log; the last statement of each wins (an engine started again logs it again)."""
    if not path.is_file():
        return NO_LOG
    text = path.read_text(errors="replace")
    for pattern, source in KV_LOG_LINES:
        found = pattern.findall(text)
        if found:
            return EngineLogFacts(True, int(found[-1].replace(",", "")), source)
    return EngineLogFacts(True)
