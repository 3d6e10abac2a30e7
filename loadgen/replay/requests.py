"""A `Dataset` -> the requests a sweep sends: sampled, filtered, windowed, each with its lengths known.

Prompts and conversations are sent as the file has them. The output length asked for is the request's own
`max_tokens`, else the recorded answer's length, else the workload's output length. Lengths are counted
with the tokenizer when one is given, else estimated at 4 characters a token (the server's own counts are
what the metrics use in any case). A trace's requests get synthesized prompts of its lengths
(`loadgen.replay.blocks`) and its timestamps, relative to the start of its window.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from loadgen.datasets import PromptTokenizer
from loadgen.replay.blocks import BlockPrompts
from loadgen.replay.formats import Conversation, Dataset, DatasetError, TraceRequest
from loadgen.types import Api, DatasetInfo, Distribution, RequestSpec
from loadgen.workload import DatasetSettings, LengthDistribution

CHARS_PER_TOKEN = 4  # the usual estimate for English text without a tokenizer


@dataclass(frozen=True)
class ReplayItem:
    """One entry to send: a conversation (or single prompt) or a trace request."""

    index: int  # its line, entry or row in the file
    lengths: tuple[tuple[int, int], ...]  # (input, output) tokens of each request it sends
    conversation: Conversation | None = None
    trace: TraceRequest | None = None
    arrival_s: float | None = None  # traces: seconds from the window's start


@dataclass(frozen=True)
class Replay:
    dataset: Dataset
    settings: DatasetSettings
    items: tuple[ReplayItem, ...]
    lengths_counted: bool  # with a tokenizer (else estimated)
    notes: tuple[str, ...] = ()

    @property
    def num_requests(self) -> int:
        return sum(len(item.lengths) for item in self.items)

    @property
    def span_s(self) -> float:
        """A trace's length in time (unscaled): its last arrival."""
        return max((item.arrival_s or 0.0 for item in self.items), default=0.0)


def prepare_replay(dataset: Dataset, settings: DatasetSettings, output_tokens: LengthDistribution, seed: int,
                   tokenizer: PromptTokenizer | None = None) -> Replay:
    rng = np.random.default_rng([seed, 3])
    notes = []
    if dataset.num_skipped:
        notes.append(f"{dataset.num_skipped} entries without a user turn left out")
    if dataset.is_trace:
        items = _trace_items(dataset.trace, settings)
        if settings.window is not None:
            notes.append(f"window {settings.window[0]:g}-{settings.window[1]:g} s of the trace")
    else:
        count = tokenizer.count if tokenizer is not None else _estimate
        items = [_conversation_item(c, settings, output_tokens, rng, count) for c in dataset.conversations]
    before = len(items)
    if settings.max_input_tokens is not None:
        items = [cut for item in items if (cut := _within(item, settings.max_input_tokens)) is not None]
        if len(items) < before:
            notes.append(f"{before - len(items)} of {before} longer than {settings.max_input_tokens} input tokens "
                         "left out")
    if not items:
        raise DatasetError(f"{dataset.path}: no request left to send after "
                           + ("the trace window" if settings.max_input_tokens is None else
                              f"--max-input-tokens {settings.max_input_tokens}"))
    if settings.sample is not None and settings.sample < len(items):
        keep = np.sort(np.random.default_rng([seed, 4]).choice(len(items), settings.sample, replace=False))
        notes.append(f"{settings.sample} of {len(items)} sampled (seed {seed})")
        items = [items[i] for i in keep]
    return Replay(dataset, settings, tuple(items), tokenizer is not None or dataset.is_trace, tuple(notes))


def replay_requests(replay: Replay, api: Api, tokenizer: PromptTokenizer | None = None, seed: int = 0,
                    cycle: bool = True) -> Iterator[RequestSpec]:
    """The requests in order; again from the start when `cycle` (a sweep's levels may send more requests
    than the file holds), once otherwise (a trace replayed at its own times)."""
    blocks = BlockPrompts(replay.settings.block_tokens, seed, tokenizer) if replay.dataset.is_trace else None
    request_id = conversation_id = 0
    multi_turn = replay.settings.multi_turn
    while True:
        for item in replay.items:
            sends = zip(_messages(item, blocks), item.lengths, strict=True)
            for turn, ((prompt, system, history), (num_in, num_out)) in enumerate(sends, start=1):
                yield RequestSpec(
                    request_id=request_id, api=api, prompt=prompt, max_tokens=num_out, system_prompt=system,
                    input_tokens_target=num_in, history=history,
                    conversation_id=conversation_id if multi_turn else None, turn=turn if multi_turn else None,
                    arrival_s=item.arrival_s, dataset_index=item.index, prompt_sha256=_sha256(prompt),
                    grading=item.conversation.grading if item.conversation is not None and turn == 1 else None,
                    structure=item.conversation.structure if item.conversation is not None and turn == 1 else None)
                request_id += 1
            conversation_id += 1
        if not cycle:
            return


def _messages(item: ReplayItem, blocks: BlockPrompts | None
              ) -> list[tuple[str, str | None, tuple[tuple[str, str], ...]]]:
    """(prompt, system prompt, messages given before it) of each request the item sends."""
    if item.trace is not None:
        assert blocks is not None
        return [(blocks.prompt(item.lengths[0][0], item.trace.hash_ids, item.index), None, ())]
    conversation = item.conversation
    assert conversation is not None
    return [(turn.user, conversation.system, conversation.history if number == 0 else ())
            for number, turn in enumerate(conversation.turns[: len(item.lengths)])]


def describe(replay: Replay) -> DatasetInfo:
    """What the report states about the dataset: which file, how many requests, their lengths."""
    inputs = [num_in for item in replay.items for num_in, _ in item.lengths]
    outputs = [num_out for item in replay.items for _, num_out in item.lengths]
    settings = replay.settings
    return DatasetInfo(
        name=replay.dataset.path.name, path=str(replay.dataset.path), sha256=replay.dataset.sha256,
        format=replay.dataset.format, num_requests=replay.num_requests, num_entries=len(replay.items),
        num_in_file=len(replay.dataset), input_tokens=Distribution.of(np.asarray(inputs)),
        output_tokens=Distribution.of(np.asarray(outputs)),
        lengths=("from the trace" if replay.dataset.is_trace else
                 "counted with the tokenizer" if replay.lengths_counted
                 else f"estimated at {CHARS_PER_TOKEN} characters a token, without --tokenizer"),
        turns=str(settings.turns) if settings.multi_turn else None,
        time_scale=settings.time_scale if replay.dataset.is_trace else None,
        span_s=replay.span_s if replay.dataset.is_trace else None, notes=replay.notes)


def check_context(replay: Replay, max_model_len: int) -> None:
    """Refuse a dataset with requests the model can't take (prompt and output over its context)."""
    over = [(item.index, num_in + num_out) for item in replay.items for num_in, num_out in item.lengths
            if num_in + num_out > max_model_len]
    if not over:
        return
    where = "row" if replay.dataset.is_trace else "line" if replay.dataset.format == "jsonl" else "entry"
    listed = ", ".join(f"{where} {index} ({tokens} tokens)" for index, tokens in over[:3])
    how = "" if replay.lengths_counted else f", lengths estimated at {CHARS_PER_TOKEN} characters a token"
    raise DatasetError(f"{replay.dataset.path}: {len(over)} request(s) need more than the model's context of "
                       f"{max_model_len} tokens (input and output{how}), e.g. {listed}; leave them out with "
                       f"--max-input-tokens {max(1, max_model_len // 2)} (or less), or serve a longer context")


def _trace_items(trace: tuple[TraceRequest, ...], settings: DatasetSettings) -> list[ReplayItem]:
    start, end = settings.window if settings.window is not None else (trace[0].timestamp_s, math.inf)
    origin = start if settings.window is not None else trace[0].timestamp_s
    return [ReplayItem(r.index, ((r.input_tokens, r.output_tokens),), trace=r, arrival_s=r.timestamp_s - origin)
            for r in trace if start <= r.timestamp_s < end]


def _conversation_item(conversation: Conversation, settings: DatasetSettings, output_tokens: LengthDistribution,
                       rng: np.random.Generator, count: Callable[[str], int]) -> ReplayItem:
    """Lengths of each turn sent: a turn's input is everything before it (the recorded answers stand in for
    the server's, which are asked to be as long)."""
    limit = len(conversation.turns) if settings.turns == "all" else (settings.turns or 1)
    turns = conversation.turns[:limit] if settings.multi_turn else conversation.turns[:1]
    context = sum(count(text) for _, text in conversation.history) + (count(conversation.system)
                                                                    if conversation.system else 0)
    lengths = []
    for number, turn in enumerate(turns):
        num_in = context + count(turn.user)
        if number == 0 and conversation.max_tokens is not None:
            num_out = conversation.max_tokens
        elif turn.answer:
            num_out = max(1, count(turn.answer))
        else:
            num_out = int(output_tokens.sample(rng, 1)[0])
        lengths.append((num_in, num_out))
        context = num_in + num_out
    return ReplayItem(conversation.index, tuple(lengths), conversation=conversation)


def _within(item: ReplayItem, max_input_tokens: int) -> ReplayItem | None:
    """The item's requests up to the first one over the limit; None when the first one is."""
    keep = 0
    while keep < len(item.lengths) and item.lengths[keep][0] <= max_input_tokens:
        keep += 1
    if keep == 0:
        return None
    return item if keep == len(item.lengths) else ReplayItem(item.index, item.lengths[:keep], item.conversation,
                                                             item.trace, item.arrival_s)


def _estimate(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
