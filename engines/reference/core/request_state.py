"""One request's output side: streaming detokenization, stop rules and token timing.

Stop rules, in vLLM's order, checked after every generated token:
  1. before `min_tokens` tokens nothing stops the request but max_model_len (and `banned_token_ids`
     keeps EOS and stop tokens from being sampled);
  2. EOS / end-of-turn (unless `ignore_eos`) and `stop_token_ids` -> "stop"; the token counts as output,
     its text is never emitted;
  3. a stop string that ends in text generated from then on -> "stop"; the text is cut before it (found
     by `StopMatcher` as the text grows: O(new characters x stops) a token, never the whole text again);
  4. `max_tokens` -> "length"; 5. the sequence reached max_model_len -> "length".
A constrained request (`grammar`, core/grammar.py) advances its grammar by each token and stops when the grammar
ends, on a stop token, whatever `ignore_eos` and `min_tokens` say: past its end the grammar allows nothing else.

Text is released only when final: a tail that could still grow into a stop string, and bytes of an
incomplete UTF-8 character, are held back until they can't. This module knows nothing of scheduling or
of the model: the engine hands it each sampled token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engines.reference.core.grammar import GrammarState
from engines.reference.core.sampling import SamplingParams
from engines.reference.core.sequence import Sequence
from engines.reference.core.stop_strings import StopMatcher
from engines.reference.loading.tokenizer import IncrementalDetokenizer, Tokenizer


@dataclass(eq=False)
class RequestState:
    """Mutable per-request state the engine keeps beside the scheduler's Sequence."""

    seq: Sequence
    params: SamplingParams
    generator: torch.Generator | None
    tokenizer: Tokenizer | None
    stop_token_ids: frozenset[int]
    arrival_time_s: float
    last_token_time_s: float | None = None
    grammar: GrammarState | None = None  # a constrained answer's grammar
    text: str = ""  # detokenized output so far (stop token text excluded)
    num_emitted_chars: int = 0
    detokenizer: IncrementalDetokenizer | None = field(init=False)
    stop_matcher: StopMatcher = field(init=False)
    _banned_ids: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.detokenizer = IncrementalDetokenizer(self.tokenizer) if self.tokenizer is not None else None
        self.stop_matcher = StopMatcher(self.params.stop)
        self._banned_ids = tuple(sorted(self.stop_token_ids)) if self.params.min_tokens else ()  # once, not per step

    def banned_token_ids(self) -> tuple[int, ...]:
        """Token ids the next draw must avoid: the stop tokens while fewer than min_tokens were generated."""
        if self.seq.num_output_tokens < self.params.min_tokens and self.grammar is None:
            return self._banned_ids
        return ()

    def record_token_time(self, now_s: float) -> tuple[float | None, float | None]:
        """(ttft_s, None) for the first token, (None, itl_s) for later ones."""
        previous, self.last_token_time_s = self.last_token_time_s, now_s
        if previous is None:
            return now_s - self.arrival_time_s, None
        return None, now_s - previous

    def append_token(self, token_id: int, max_model_len: int, num_later: int = 0) -> tuple[str, str | None]:
        """Account for a token appended to seq.token_ids, `num_later` tokens before its end (a step that accepted
        drafts appends several); returns (final new text, finish reason)."""
        params, num_output = self.params, self.seq.num_output_tokens - num_later
        if self.grammar is not None and self.grammar.accept(token_id) and self.grammar.is_done:
            return self._finish(True), "stop"
        is_min_reached = num_output >= params.min_tokens
        if is_min_reached and token_id in self.stop_token_ids:
            return self._finish(is_min_reached), "stop"
        cut = self._push(self.detokenizer.push(token_id) if self.detokenizer is not None else "")
        if is_min_reached and cut is not None:
            return self._release(cut), "stop"
        if (params.max_tokens is not None and num_output >= params.max_tokens) \
                or self.seq.num_tokens - num_later >= max_model_len:
            return self._finish(is_min_reached), "length"
        return self._release(len(self.text) - self.stop_matcher.num_held_back_chars), None

    def _push(self, new_text: str) -> int | None:
        """Append detokenized text; returns where a stop string ending in it begins (an index into text)."""
        self.text += new_text
        return self.stop_matcher.feed(new_text) if new_text and self.params.stop else None

    def _finish(self, is_min_reached: bool) -> str:
        """Flush the detokenizer and release all text (still cut at a stop string the flush completed)."""
        cut = self._push(self.detokenizer.flush() if self.detokenizer is not None else "")
        return self._release(cut if is_min_reached and cut is not None else len(self.text))

    def _release(self, end: int) -> str:
        end = max(end, self.num_emitted_chars)
        new_text = self.text[self.num_emitted_chars : end]
        self.num_emitted_chars = end
        return new_text
