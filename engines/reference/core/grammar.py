"""Constrained decoding: a request's answer held to a grammar, by xgrammar (the library vLLM uses).

    grammars = Grammars(tokenizer, vocab_size)
    state = grammars.new_state(Constraint.json_schema(schema))   # compiled once per constraint, off the step thread
    engine.add_request(..., grammar=state)

Contract: a `Constraint` says what an answer must be: any JSON object, or JSON that matches a schema (compact:
no free whitespace, so a model can't pad forever). `Grammars.new_state` compiles it (cached per constraint;
thread-safe, so a server calls it before the request reaches the step thread) and gives the request its own
`GrammarState`. Each step `mask_logits` sets to -inf, in place, every token a constrained row's grammar does not
allow next (free rows untouched: constrained and free rows share one batch); `GrammarState.accept` advances the
grammar by the token drawn; `is_done` once it ended, which it does only on a stop token, after the JSON is
complete. Nothing here schedules or samples.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from engines.reference.loading.tokenizer import Tokenizer

INSTALL_HINT = "pip install xgrammar"


class GrammarError(ValueError):
    """A constraint that can't be compiled (or no xgrammar to compile it); the message says which."""


@dataclass(frozen=True)
class Constraint:
    """Any JSON object (`schema_json` None), or JSON matching the schema in `schema_json` (its keys in the order
    given: a grammar writes an object's properties in that order)."""

    schema_json: str | None = None

    @classmethod
    def json_object(cls) -> Constraint:
        return cls(None)

    @classmethod
    def json_schema(cls, schema: dict[str, Any]) -> Constraint:
        return cls(json.dumps(schema))


class GrammarState:
    """One request's place in its grammar."""

    def __init__(self, matcher: Any) -> None:
        self._matcher = matcher

    def accept(self, token_id: int) -> bool:
        """Advance by a drawn token; False if the grammar did not allow it (the draw was not masked)."""
        return bool(self._matcher.accept_token(token_id))

    @property
    def is_done(self) -> bool:
        return bool(self._matcher.is_terminated())

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        self._matcher.fill_next_token_bitmask(bitmask, row)


class Grammars:
    """The tokenizer's vocabulary as xgrammar sees it and every constraint compiled so far (built on first use)."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size  # the logits' width: ids past the tokenizer's are never allowed
        self._lock = threading.Lock()
        self._compiler: Any = None

    def new_state(self, constraint: Constraint) -> GrammarState:
        xgr = _xgrammar()
        return GrammarState(xgr.GrammarMatcher(self._compiled(constraint)))

    @functools.lru_cache(maxsize=64)  # noqa: B019 (one Grammars per engine, kept for its life)
    def _compiled(self, constraint: Constraint) -> Any:
        compiler = self._get_compiler()
        try:
            if constraint.schema_json is None:
                return compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
            return compiler.compile_json_schema(constraint.schema_json, any_whitespace=False)
        except Exception as exc:  # xgrammar's own error: a schema it can't turn into a grammar
            raise GrammarError(f"the schema can't be compiled to a grammar: {str(exc)[:200]}") from None

    def _get_compiler(self) -> Any:
        with self._lock:
            if self._compiler is None:
                xgr = _xgrammar()
                info = xgr.TokenizerInfo(_encoded_vocab(self.tokenizer, self.vocab_size), xgr.VocabType.BYTE_LEVEL,
                                         vocab_size=self.vocab_size, stop_token_ids=list(self.tokenizer.stop_token_ids))
                self._compiler = xgr.GrammarCompiler(info, max_threads=1)
            return self._compiler


def _encoded_vocab(tokenizer: Tokenizer, vocab_size: int) -> list[str]:
    """Each id's byte-level token; special tokens (chat markers) as empty, so a grammar never allows their text."""
    backend = tokenizer.backend
    special = {i for i, token in backend.get_added_tokens_decoder().items() if token.special}
    return ["" if i in special else (backend.id_to_token(i) or "") for i in range(vocab_size)]


def mask_logits(logits: torch.Tensor, states: Sequence[GrammarState | None]) -> None:
    """Keep, in each constrained row of `logits` (R, V), only the tokens its grammar allows next; in place."""
    rows = [row for row, state in enumerate(states) if state is not None]
    if not rows:
        return
    xgr = _xgrammar()
    bitmask = xgr.allocate_token_bitmask(len(states), logits.shape[-1])
    for row in rows:
        states[row].fill(bitmask, row)  # type: ignore[union-attr]
    xgr.apply_token_bitmask_inplace(logits, bitmask, indices=rows)


@functools.cache
def _xgrammar() -> Any:
    try:
        import xgrammar
    except ImportError:
        raise GrammarError(f"structured outputs need xgrammar, which is not installed ({INSTALL_HINT})") from None
    return xgrammar
