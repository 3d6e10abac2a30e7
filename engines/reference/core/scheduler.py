"""Scheduler: which sequences compute how many tokens in the next step.

It owns the block manager and the waiting/running queues. Each step, in this order:

    out = scheduler.schedule()                      # (seq, num_new_tokens) pairs; blocks already cover them
    token_ids = runner.run(out)                     # one sampled id per scheduled entry (None if not sampling)
    for seq in scheduler.postprocess(out, token_ids):   # advances num_computed_tokens, appends sampled tokens
        if <stop condition, or seq.num_tokens >= max_model_len>:
            scheduler.finish(seq)

`add` and `abort` are called between steps. An abort after the model ran and before `postprocess` is
safe: postprocess skips sequences that are no longer running.

Running sequences are served first, decodes before prefill chunks, then waiting ones are admitted
(FCFS). A step that holds decodes sizes its prefill chunks by time as well as by tokens: given a step cost
model (`core/step_cost.py`) and config.max_step_ms, each chunk is cut to what keeps the step within the
target, and within config.max_step_ratio times what its decodes alone take (a small batch decoding far
faster than the target would otherwise see one gap many times the others). Where the decodes alone take
longer, prompts may still take config.min_prefill_share of the step's time, and the step's first chunk
never less than config.min_prefill_chunk_tokens, so new users are not starved by running ones. A step
without decodes stalls no one and takes the token budget whole, and so does a step while more than
config.wave_share of the users wait for their prompt (a wave came in at once: letting it in over tens of short
steps holds the many back for the few decoding, and the batch stays small for longer).

When a running sequence needs a block and none is free, the newest running sequence (the last
one `add`ed: each scheduler stamps arrival_index from a counter of its own) is preempted by recompute:
its blocks are freed and it goes back to the front of the waiting queue with its generated tokens, to be
recomputed later. A sequence of a LoRA adapter is admitted only while the running batch holds fewer than
`max_loras` distinct adapters or already holds its own; otherwise it waits, and later arrivals of adapters
that fit go ahead of it (as vLLM's scheduler does).

Batching modes: "continuous" admits at every step; "static" admits a batch only when
the previous batch has entirely finished; "none" is static with a batch of one. This module knows
nothing about models, tensors or sampling.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence as SequenceOf
from dataclasses import dataclass, field
from typing import NamedTuple

from engines.reference.core.block_manager import BlockManager
from engines.reference.core.config import EngineConfig
from engines.reference.core.prefix_cache import BlockHashFn, chain_hash
from engines.reference.core.sequence import Sequence, SequenceStatus
from engines.reference.core.step_cost import StepCostModel, StepShape


class QueueFullError(RuntimeError):
    """`add` was called although `can_add()` said no (the server answers 503)."""


class ScheduledSeq(NamedTuple):
    """Compute seq.token_ids[seq.num_computed_tokens : + num_new_tokens]; sample after it if is_sampling.
    A decode with drafts computes its last token and the first num_draft_tokens of seq.draft_token_ids
    (num_new_tokens counts both), and samples after each."""

    seq: Sequence
    num_new_tokens: int
    is_sampling: bool
    num_draft_tokens: int = 0


@dataclass(frozen=True)
class SchedulerOutput:
    """One step's work: the scheduled entries (decodes first) and the sequences preempted by it."""

    scheduled: tuple[ScheduledSeq, ...]
    preempted: tuple[Sequence, ...] = ()

    @property
    def num_batched_tokens(self) -> int:
        return sum(entry.num_new_tokens for entry in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled

    @property
    def shape(self) -> StepShape:
        return _shape_of(self.scheduled)


def _shape_of(scheduled: SequenceOf[ScheduledSeq]) -> StepShape:
    """Decode rows (entries of one new token), prefill tokens (the rest) and attended pairs of a step."""
    num_decode_rows = sum(1 for entry in scheduled if entry.num_new_tokens == 1)
    num_pairs = sum(e.num_new_tokens * (e.seq.num_computed_tokens + e.num_new_tokens) for e in scheduled)
    return StepShape(num_decode_rows, sum(e.num_new_tokens for e in scheduled) - num_decode_rows, num_pairs)


@dataclass
class _Step:
    """Mutable builder of one step: the token budget left and what was decided so far."""

    num_tokens_left: int
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    num_prefill_chunks: int = 0

    def add(self, seq: Sequence, num_new_tokens: int) -> None:
        num_drafts = max(0, seq.num_computed_tokens + num_new_tokens - seq.num_tokens)
        is_sampling = seq.num_computed_tokens + num_new_tokens - num_drafts == seq.num_tokens
        self.scheduled.append(ScheduledSeq(seq, num_new_tokens, is_sampling, num_drafts))
        self.num_tokens_left -= num_new_tokens
        self.num_prefill_chunks += seq.num_uncomputed_tokens > 1


class Scheduler:
    """Waiting and running queues over one block manager.

    Changes: the queues, each sequence's status and blocks (through the block manager), its arrival_index
    (stamped once, in `add`, from this scheduler's own counter), num_computed_tokens and token_ids (in
    `postprocess`). Never reads or changes sampling_params.
    """

    def __init__(self, config: EngineConfig, hash_fn: BlockHashFn = chain_hash,
                 step_cost: StepCostModel | None = None) -> None:
        """`step_cost`: what steps cost as the engine measures them; with config.max_step_ms it sizes prefill
        chunks by time (read only: the engine observes the steps)."""
        self.config = config
        self.step_cost = step_cost
        self.block_manager = BlockManager(
            config.num_kv_blocks, config.block_size, config.enable_prefix_caching, hash_fn
        )
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order
        self._by_id: dict[str, Sequence] = {}
        self._batch_ids: set[str] = set()  # static/none: request ids of the current batch
        self._max_batch_seqs = 1 if config.batching == "none" else config.max_num_seqs
        self._arrival_indices = itertools.count()  # this scheduler's alone: engines in one process never share it
        self.num_preemptions = 0

    # ---- queries ---------------------------------------------------------------------------------

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def can_add(self) -> bool:
        """Whether the waiting queue has room for a new request. Changes nothing."""
        return len(self.waiting) < self.config.max_num_waiting

    def can_ever_fit(self, num_tokens: int) -> bool:
        """Whether a sequence of `num_tokens` (prompt + max output) fits max_model_len and the whole cache."""
        return (
            0 < num_tokens <= self.config.max_model_len
            and self.block_manager.num_blocks_for(num_tokens) <= self.config.num_kv_blocks
        )

    # ---- requests in and out ---------------------------------------------------------------------

    def add(self, seq: Sequence) -> None:
        """Queue a new sequence at the back of the waiting queue and stamp its arrival_index.

        Raises QueueFullError if not `can_add()`, ValueError if its prompt can never fit or its id is taken.
        """
        if not self.can_add():
            raise QueueFullError(f"waiting queue is full ({self.config.max_num_waiting} requests)")
        if not self.can_ever_fit(seq.num_tokens):
            raise ValueError(
                f"request {seq.request_id!r}: {seq.num_tokens} prompt tokens exceed max_model_len "
                f"({self.config.max_model_len}) or the KV cache ({self.config.kv_cache_tokens} tokens)"
            )
        if seq.request_id in self._by_id:
            raise ValueError(f"request id {seq.request_id!r} is already queued or running")
        seq.status = SequenceStatus.WAITING
        seq.arrival_index = next(self._arrival_indices)
        self.waiting.append(seq)
        self._by_id[seq.request_id] = seq

    def abort(self, request_id: str) -> Sequence | None:
        """Remove a waiting or running sequence and free its blocks; None if the id is not known."""
        seq = self._by_id.get(request_id)
        if seq is None:
            return None
        if seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
            self._drop(seq)
        else:
            self.finish(seq)
        return seq

    def finish(self, seq: Sequence) -> None:
        """Mark a running sequence finished and free its blocks (full blocks stay cached)."""
        if seq.status is not SequenceStatus.RUNNING:
            raise ValueError(f"request {seq.request_id!r} is {seq.status.value}, not running")
        self.running.remove(seq)
        self.block_manager.free(seq)
        self._drop(seq)

    def _drop(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.FINISHED
        del self._by_id[seq.request_id]
        self._batch_ids.discard(seq.request_id)

    # ---- one step --------------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        """Decide this step's work; every scheduled sequence's block_table covers all its tokens."""
        step = _Step(num_tokens_left=self.config.max_num_batched_tokens)
        self._schedule_running(step)
        self._admit_waiting(step)  # FCFS: a sequence preempted in this step heads the queue and blocks it
        self._check_progress()
        return SchedulerOutput(tuple(step.scheduled), tuple(step.preempted))

    def _schedule_running(self, step: _Step) -> None:
        # Decodes (1 uncomputed token) first, then prefill chunks; each group in admission order.
        pending = sorted(self.running, key=lambda seq: seq.num_uncomputed_tokens > 1)
        while pending and step.num_tokens_left > 0:
            seq = pending.pop(0)
            num_new_tokens = self._chunk(seq, step)
            # drafts past the token budget are dropped: they only ever save time
            del seq.draft_token_ids[max(0, num_new_tokens - seq.num_uncomputed_tokens):]
            if num_new_tokens and self._reserve_blocks(seq, pending, step):  # (which may drop the drafts)
                step.add(seq, min(num_new_tokens, seq.num_uncomputed_tokens + len(seq.draft_token_ids)))

    def _chunk(self, seq: Sequence, step: _Step) -> int:
        """The tokens of `seq` this step computes: all it needs within the token budget and, beside decodes,
        within the step's time budget (the step's first prefill chunk at least min_prefill_chunk_tokens). A
        decode's drafts count as tokens it needs."""
        if seq.num_uncomputed_tokens == 1:
            return min(1 + len(seq.draft_token_ids), step.num_tokens_left)
        num_tokens = min(seq.num_uncomputed_tokens, step.num_tokens_left)
        decodes = [entry for entry in step.scheduled if entry.num_new_tokens - entry.num_draft_tokens == 1]
        cost = self.step_cost.cost if self.step_cost is not None else None
        if num_tokens <= 1 or not decodes or cost is None or self.config.max_step_ms is None:
            return num_tokens  # no decode to stall, or nothing learned yet: the token budget alone
        if self._is_wave(len(decodes)):
            return num_tokens  # most users wait for their prompt: they go before the few decoding ones
        decodes_ms = cost.of(_shape_of(decodes))
        budget_ms = self.config.max_step_ms
        if self.config.max_step_ratio is not None:  # a fast small batch: no gap many times its median
            budget_ms = min(budget_ms, self.config.max_step_ratio * decodes_ms)
        # past the target, prompts still get their share: the decodes' time is (1 - share) of the step's
        budget_ms = max(budget_ms, decodes_ms / (1 - self.config.min_prefill_share))
        within = self.step_cost.prefill_tokens_within(budget_ms, _shape_of(step.scheduled), seq.num_computed_tokens)
        floor = self.config.min_prefill_chunk_tokens if step.num_prefill_chunks == 0 else 0
        return min(num_tokens, max(within or 0, floor))

    def _is_wave(self, num_decodes: int) -> bool:
        """Whether more than config.wave_share of the users wait for their prompt to be computed (queued, or part
        computed) beside `num_decodes` decoding ones."""
        if self.config.wave_share is None:
            return False
        num_prompts = len(self.waiting) + sum(1 for seq in self.running if seq.num_uncomputed_tokens > 1)
        return num_prompts > self.config.wave_share * (num_prompts + num_decodes)

    def _reserve_blocks(self, seq: Sequence, pending: list[Sequence], step: _Step) -> bool:
        """Make `seq`'s block_table cover its tokens, preempting the newest unscheduled sequences.

        False when `seq` itself was the newest and got preempted.
        """
        drafts = len(seq.draft_token_ids)
        while not self.block_manager.can_append(seq, drafts):
            if drafts:  # drafts only save time: dropped before anyone is preempted for them
                seq.draft_token_ids.clear()
                drafts = 0
                continue
            victim = max([*pending, seq], key=_arrival_index)
            self._preempt(victim, step)
            if victim is seq:
                return False
            pending.remove(victim)
        self.block_manager.append_slot(seq, drafts)
        return True

    def _preempt(self, seq: Sequence, step: _Step) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.draft_token_ids.clear()
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)
        step.preempted.append(seq)

    def running_adapters(self) -> set[str]:
        """The distinct LoRA adapters of the running batch."""
        return {seq.adapter for seq in self.running if seq.adapter is not None}

    def _admit_waiting(self, step: _Step) -> None:
        is_continuous = self.config.batching == "continuous"
        is_new_batch = not self._batch_ids
        adapters: set[str] | None = None  # found at the first waiting request of an adapter
        held_back: list[Sequence] = []  # adapters past max_loras: they keep their place at the head
        while self.waiting and len(self.running) < self._max_batch_seqs:
            seq = self.waiting[0]
            if is_continuous and step.num_tokens_left == 0:
                break
            if not (is_continuous or is_new_batch or seq.request_id in self._batch_ids):
                break  # static/none: the current batch has not finished yet
            if seq.adapter is not None:
                adapters = self.running_adapters() if adapters is None else adapters
                if seq.adapter not in adapters and len(adapters) >= self.config.max_loras:
                    held_back.append(self.waiting.popleft())
                    continue
            if is_continuous and self._chunk(seq, step) == 0:
                break  # the step's time is spent: admitted now, it would only hold blocks
            if not self.block_manager.can_allocate(seq):
                break
            self.waiting.popleft()
            if adapters is not None and seq.adapter is not None:
                adapters.add(seq.adapter)
            self.block_manager.allocate(seq)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            if not is_continuous:
                self._batch_ids.add(seq.request_id)
            num_new_tokens = self._chunk(seq, step) if step.num_tokens_left > 0 else 0
            if num_new_tokens:
                step.add(seq, num_new_tokens)
        self.waiting.extendleft(reversed(held_back))

    def _check_progress(self) -> None:
        """Fail loudly, rather than loop forever, when the head of the queue outgrew the whole cache."""
        if self.running or not self.waiting:
            return
        seq = self.waiting[0]
        if self.block_manager.num_blocks_for(seq.num_tokens) > self.config.num_kv_blocks:
            raise RuntimeError(
                f"request {seq.request_id!r} has {seq.num_tokens} tokens and can never fit in the KV cache "
                f"({self.config.kv_cache_tokens} tokens): the engine must finish sequences at max_model_len"
            )

    # ---- after the step --------------------------------------------------------------------------

    def postprocess(self, output: SchedulerOutput,
                    sampled_token_ids: SequenceOf[int | SequenceOf[int] | None]) -> list[Sequence]:
        """Record a finished step; returns the sequences that got new tokens, in scheduled order.

        `sampled_token_ids` holds one entry per scheduled entry (ignored where not is_sampling): a token id, or
        for an entry with drafts the tokens it yields (its accepted drafts, then the model's own token).
        Appends them, advances num_computed_tokens over what is now known to be right (a rejected draft's
        K/V is not), caches newly full blocks and gives back the blocks rejected drafts held. Sequences
        finished or aborted since `schedule()` are skipped. Never finishes a sequence: the engine
        decides that and calls `finish`.
        """
        if len(sampled_token_ids) != len(output.scheduled):
            raise ValueError(
                f"expected {len(output.scheduled)} sampled token ids (one per scheduled entry), "
                f"got {len(sampled_token_ids)}"
            )
        sampled: list[Sequence] = []
        for (seq, num_new_tokens, is_sampling, num_drafts), token_id in zip(output.scheduled, sampled_token_ids,
                                                                              strict=True):
            seq.draft_token_ids.clear()
            if seq.status is not SequenceStatus.RUNNING:
                continue
            if not is_sampling:
                self.block_manager.mark_computed(seq, num_new_tokens)
                continue
            tokens = [token_id] if isinstance(token_id, int) else list(token_id or ())
            if not 1 <= len(tokens) <= num_drafts + 1:
                raise ValueError(f"request {seq.request_id!r} was sampling with {num_drafts} drafts but got "
                                 f"{token_id!r}")
            seq.token_ids.extend(tokens)  # first: the blocks cached below read the accepted drafts
            self.block_manager.mark_computed(seq, num_new_tokens - num_drafts + len(tokens) - 1)
            if num_drafts:
                self.block_manager.trim(seq)
            sampled.append(seq)
        return sampled


def _arrival_index(seq: Sequence) -> int:
    """The order key of preemption (newest first); every queued sequence was stamped by `add`."""
    assert seq.arrival_index is not None, f"request {seq.request_id!r} was never added to a scheduler"
    return seq.arrival_index
