"""The script a scripted server follows (its timing, faults, load and the provider it plays), what it really
sent (`SentTiming`, for `GET /_sent`), and its quiz: a question answered right for a known share of prompts.

It knows nothing of sockets or HTTP: scripted/answers.py turns a script into chunks, scripted/protocol.py
serves them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

Fault = Literal["none", "http_500", "http_429", "error_event", "rate_limit_event", "cut", "stall", "drop",
                "drop_reused"]


@dataclass(frozen=True)
class Script:
    ttft_ms: float = 100.0
    itl_ms: float = 20.0
    tokens_per_chunk: int = 1
    fault: Fault = "none"
    fault_every: int = 1
    fault_after_chunks: int = 3
    stall_ms: float = 1000.0
    model: str = "scripted"
    itl_per_stream_ms: float = 0.0
    max_streams: int = 0  # 0: no cap
    reasoning_tokens: int = 0  # the first tokens of every chat answer, streamed as reasoning
    rate_limit_per_s: float = 0.0  # 0: no limit
    rate_limit_burst: float = 1.0
    prefix_cache_block_words: int = 0  # 0: no prefix cache
    # A quiz: a prompt ending in "[[answer: TEXT]]" is answered TEXT for a known share of questions, else "wrong"
    # (below 0: off). Each question is decided by its hash (`quiz_is_right`), the share lowered by
    # right_share_per_stream for each other stream in flight when it arrives (answers that worsen under load).
    right_share: float = -1.0
    right_share_per_stream: float = 0.0
    adapters: tuple[str, ...] = ()  # LoRA adapters served beside `model`
    # > 0: speculative decoding played with that many draft tokens a step: each chunk is one verified draft whose
    # tokens past the first were accepted, counted at GET /metrics under vLLM's names (SpecCounters)
    spec_tokens: int = 0
    spec_report: Literal["llamacpp", "vllm"] = "llamacpp"  # each answer's own figures: llama.cpp's timings or vLLM's
    # A request that asks for a shape (response_format JSON, tools) is answered in it, validly for this share of
    # them and broken in a known way for the rest (scripted/shapes.py)
    valid_share: float = 1.0

    @property
    def is_loaded(self) -> bool:
        return self.itl_per_stream_ms > 0 or self.max_streams > 0


class SentTiming:
    """When chunks really left (a server on one core writes 256 chunks due together one after another):
    the time from each request's arrival to its first chunk, and between a stream's consecutive chunks.
    `GET /_sent` reports and clears them, so a client's error can be told apart from the server's."""

    def __init__(self) -> None:
        self.ttft_ms: list[float] = []
        self.itl_ms: list[float] = []

    def report_and_clear(self) -> dict[str, Any]:
        report = {"num_requests": len(self.ttft_ms), "num_gaps": len(self.itl_ms),
                  "ttft_ms": _percentiles(self.ttft_ms), "itl_ms": _percentiles(self.itl_ms)}
        self.ttft_ms, self.itl_ms = [], []
        return report


def _percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {f"p{q}": ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] for q in (50, 90, 99)}


class SpecCounters:
    """Speculative decoding as the script plays it, counted as vLLM counts it: a chunk of n tokens is one draft
    of `spec_tokens` tokens of which the first n - 1 were accepted (the last token is the target model's own).
    So a level's truth is known in closed form: acceptance (tokens_per_chunk - 1) / spec_tokens, tokens per
    step tokens_per_chunk, every position below tokens_per_chunk - 1 accepted in every draft."""

    def __init__(self) -> None:
        self.drafts = self.draft_tokens = self.accepted_tokens = self.generated_tokens = 0
        self.accepted_by_position: list[int] = []

    def record(self, tokens: int, spec_tokens: int) -> None:
        accepted = min(max(tokens - 1, 0), spec_tokens)
        self.drafts += 1
        self.draft_tokens += spec_tokens
        self.accepted_tokens += accepted
        self.generated_tokens += tokens
        self.accepted_by_position += [0] * (spec_tokens - len(self.accepted_by_position))
        for position in range(accepted):
            self.accepted_by_position[position] += 1

    def page(self, model: str) -> bytes:
        """The counters as Prometheus text, vLLM's names and labels."""
        label = f'model_name="{model}"'
        lines = []
        for name, value in (("generation_tokens", self.generated_tokens), ("spec_decode_num_drafts", self.drafts),
                            ("spec_decode_num_draft_tokens", self.draft_tokens),
                            ("spec_decode_num_accepted_tokens", self.accepted_tokens)):
            lines.append(f"# TYPE vllm:{name} counter\nvllm:{name}_total{{{label}}} {value}")
        lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
        lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{label},position="{k}"}} {value}'
                  for k, value in enumerate(self.accepted_by_position)]
        return ("\n".join(lines) + "\n").encode()


QUIZ_MARK = "[[answer:"


def quiz_is_right(question: str, share: float) -> bool:
    """Whether the quiz answers `question` (the prompt before its mark) right at `share`: its hash decides."""
    return int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) / 2**32 < share


def quiz_answer(body: dict[str, Any], script: Script, streams_in_flight: int) -> str | None:
    said = body.get("messages") or []
    prompt = str(said[-1].get("content", "")) if said else str(body.get("prompt", ""))
    question, mark, rest = prompt.rpartition(QUIZ_MARK)
    if not mark:
        return None
    share = script.right_share - script.right_share_per_stream * max(0, streams_in_flight)
    return rest.split("]]", 1)[0].strip() if quiz_is_right(question, share) else "wrong"
