"""Scheduler: batching modes, budgets, chunked prefill, preemption, and no leaked blocks.

The model is replaced by `SlotCheckingRunner`, which checks the contract with the model runner
instead of computing attention: every KV slot stores a digest of the whole prefix up to its position,
and before a chunk is computed every earlier position must hold this sequence's prefix digest. A
reused, shared or recomputed block that held anything else would fail the check.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import pytest

from engines.reference.core.config import BatchingMode, EngineConfig
from engines.reference.core.scheduler import QueueFullError, Scheduler, SchedulerOutput
from engines.reference.core.sequence import Sequence, SequenceStatus

VOCAB_SIZE = 1000
REQUEST_NUMBERS = itertools.count()


class SlotCheckingRunner:
    """Stand-in for the model runner; sampled tokens are a function of the prefix, whatever the schedule."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.slots: dict[int, int] = {}
        self._digests: dict[str, list[int]] = {}

    def prefix_digests(self, seq: Sequence) -> list[int]:
        digests = self._digests.setdefault(seq.request_id, [])
        for token_id in seq.token_ids[len(digests) :]:
            digests.append(hash((digests[-1] if digests else 0, token_id)))
        return digests

    def slot(self, seq: Sequence, position: int) -> int:
        return seq.block_table[position // self.block_size] * self.block_size + position % self.block_size

    def run(self, output: SchedulerOutput) -> list[int | None]:
        sampled: list[int | None] = []
        for seq, num_new_tokens, is_sampling, _ in output.scheduled:
            digests = self.prefix_digests(seq)
            start, end = seq.num_computed_tokens, seq.num_computed_tokens + num_new_tokens
            assert 0 < num_new_tokens and end <= seq.num_tokens
            assert len(seq.block_table) * self.block_size >= end, "block_table must cover the chunk"
            for position in range(start):
                assert self.slots.get(self.slot(seq, position)) == digests[position], "stale KV slot"
            for position in range(start, end):
                self.slots[self.slot(seq, position)] = digests[position]
            sampled.append(digests[end - 1] % VOCAB_SIZE if is_sampling else None)
        return sampled


@dataclass
class Request:
    seq: Sequence
    num_output_tokens: int
    arrival_step: int = 0
    abort_after_num_steps: int | None = None  # abort once scheduled this many times (0: while queued)


@dataclass
class Trace:
    outputs: list[SchedulerOutput] = field(default_factory=list)
    running_before: list[set[str]] = field(default_factory=list)
    running_after: list[set[str]] = field(default_factory=list)
    finished_order: list[str] = field(default_factory=list)


def ids(seqs: list[Sequence]) -> set[str]:
    return {seq.request_id for seq in seqs}


def simulate(scheduler: Scheduler, requests: list[Request], max_steps: int = 100_000) -> Trace:
    """Drive add / schedule / run / postprocess / finish / abort until every request is done.

    Half the due aborts happen before schedule(), half after the model ran and before postprocess().
    """
    runner = SlotCheckingRunner(scheduler.config.block_size)
    trace, target = Trace(), {r.seq.request_id: r.num_output_tokens for r in requests}
    pending = sorted(requests, key=lambda r: r.arrival_step)
    to_abort: dict[str, tuple[Sequence, int]] = {}
    num_scheduled: dict[str, int] = {}
    for step in range(max_steps):
        while pending and pending[0].arrival_step <= step:
            request = pending.pop(0)
            scheduler.add(request.seq)
            if request.abort_after_num_steps is not None:
                to_abort[request.seq.request_id] = (request.seq, request.abort_after_num_steps)
        due = [i for i, (_, num_steps) in to_abort.items() if num_scheduled.get(i, 0) >= num_steps]
        for request_id in due[::2]:
            scheduler.abort(request_id)
        trace.running_before.append(ids(scheduler.running))
        output = scheduler.schedule()
        sampled_token_ids = runner.run(output)
        for request_id in due[1::2]:
            scheduler.abort(request_id)
        for entry in output.scheduled:
            num_scheduled[entry.seq.request_id] = num_scheduled.get(entry.seq.request_id, 0) + 1
        for seq in scheduler.postprocess(output, sampled_token_ids):
            if seq.num_output_tokens >= target[seq.request_id]:
                scheduler.finish(seq)
                trace.finished_order.append(seq.request_id)
        for request_id in [i for i, (seq, _) in to_abort.items() if seq.is_finished]:
            del to_abort[request_id]
        trace.outputs.append(output)
        trace.running_after.append(ids(scheduler.running))
        check_blocks(scheduler)
        if not pending and not scheduler.has_unfinished():
            return trace
    raise AssertionError(f"requests still unfinished after {max_steps} steps")


def check_blocks(scheduler: Scheduler) -> None:
    block_manager = scheduler.block_manager
    block_manager.check_integrity()
    references = [b for seq in scheduler.running for b in seq.block_table]
    assert all(not seq.block_table for seq in scheduler.waiting)
    for block_id in set(references):
        assert block_manager.ref_count(block_id) == references.count(block_id)
    assert block_manager.num_used_blocks == len(set(references))


def make_requests(count: int, *, prompt_len: int, num_output_tokens: int, arrival_step: int = 0) -> list[Request]:
    rng = random.Random(count * 1000 + prompt_len)
    return [
        Request(
            Sequence(f"r{next(REQUEST_NUMBERS)}", [rng.randrange(VOCAB_SIZE) for _ in range(prompt_len)]),
            num_output_tokens,
            arrival_step,
        )
        for _ in range(count)
    ]


def reference_outputs(requests: list[Request]) -> dict[str, list[int]]:
    """Outputs from a roomy cache without prefix caching: no preemption, no reuse."""
    config = EngineConfig(num_kv_blocks=4096, enable_prefix_caching=False, max_model_len=4096)
    copies = [Request(Sequence(r.seq.request_id, r.seq.token_ids), r.num_output_tokens) for r in requests]
    simulate(Scheduler(config), copies)
    return {r.seq.request_id: r.seq.output_token_ids for r in copies}


def test_none_mode_runs_one_request_at_a_time_in_arrival_order() -> None:
    """batching=none: at most one sequence is running in any step, and requests finish FCFS."""
    requests = make_requests(5, prompt_len=20, num_output_tokens=4)
    trace = simulate(Scheduler(EngineConfig(batching="none")), requests)
    assert all(len(running) <= 1 for running in trace.running_before + trace.running_after)
    assert all(len(output.scheduled) <= 1 for output in trace.outputs)
    assert trace.finished_order == [r.seq.request_id for r in requests]


def test_static_mode_admits_nothing_until_the_whole_batch_finished() -> None:
    """batching=static: a new request joins only in a step that started with nothing running."""
    first = make_requests(4, prompt_len=10, num_output_tokens=3) + make_requests(2, prompt_len=10, num_output_tokens=9)
    late = make_requests(3, prompt_len=10, num_output_tokens=2, arrival_step=2)
    trace = simulate(Scheduler(EngineConfig(batching="static", max_num_seqs=5)), first + late)
    ever_running: set[str] = set()
    for before, output, after in zip(trace.running_before, trace.outputs, trace.running_after, strict=True):
        now = after | {entry.seq.request_id for entry in output.scheduled}
        joined = now - before - ever_running
        assert not joined or not before, f"{joined} joined the running batch {before}"
        ever_running |= now
    first_batch = [r.seq.request_id for r in first[:5]]
    last_of_first_batch = max(trace.finished_order.index(request_id) for request_id in first_batch)
    assert all(trace.finished_order.index(r.seq.request_id) > last_of_first_batch for r in [first[5], *late])
    started = [min(i for i, o in enumerate(trace.outputs) if r.seq in [e.seq for e in o.scheduled]) for r in late]
    first_batch_done = max(i for i, after in enumerate(trace.running_after) if set(first_batch) & after) + 1
    assert min(started) >= first_batch_done


def test_continuous_mode_admits_a_new_request_at_the_next_step() -> None:
    """batching=continuous: a request arriving while others decode is scheduled in its arrival step."""
    early = make_requests(3, prompt_len=10, num_output_tokens=20)
    late = make_requests(1, prompt_len=10, num_output_tokens=2, arrival_step=5)
    trace = simulate(Scheduler(EngineConfig()), early + late)
    late_id = late[0].seq.request_id
    assert late_id in {entry.seq.request_id for entry in trace.outputs[5].scheduled}
    assert trace.running_before[5] == ids([r.seq for r in early])


@pytest.mark.parametrize("batching", ["none", "static", "continuous"])
def test_every_step_respects_max_num_seqs_and_max_num_batched_tokens(batching: BatchingMode) -> None:
    """No step schedules more than max_num_batched_tokens tokens or runs more than max_num_seqs sequences."""
    config = EngineConfig(
        batching=batching, max_num_seqs=4, max_num_batched_tokens=24, block_size=4, num_kv_blocks=64, max_model_len=96
    )
    rng = random.Random(7)
    requests = [
        Request(
            Sequence(f"r{i}", [rng.randrange(VOCAB_SIZE) for _ in range(rng.randint(1, 60))]), rng.randint(1, 8), i // 3
        )
        for i in range(40)
    ]
    trace = simulate(Scheduler(config), requests)
    for output, running in zip(trace.outputs, trace.running_after, strict=True):
        assert output.num_batched_tokens <= 24
        assert len(output.scheduled) <= 4 and len(running) <= 4
    assert all(r.seq.num_output_tokens == r.num_output_tokens for r in requests)


def test_chunked_prefill_splits_a_long_prompt_and_only_the_last_chunk_samples() -> None:
    """A 100-token prompt under a 32-token budget runs as chunks 32, 32, 32, 4; one token comes out."""
    scheduler = Scheduler(EngineConfig(max_num_batched_tokens=32))
    seq = Sequence("long", list(range(100)))
    scheduler.add(seq)
    runner = SlotCheckingRunner(scheduler.config.block_size)
    chunks = []
    for _ in range(4):
        output = scheduler.schedule()
        chunks.append((output.scheduled[0].num_new_tokens, output.scheduled[0].is_sampling))
        scheduler.postprocess(output, runner.run(output))
        assert seq.num_tokens == (101 if chunks[-1][1] else 100)
    assert chunks == [(32, False), (32, False), (32, False), (4, True)]
    assert seq.num_computed_tokens == 100 and seq.num_output_tokens == 1


@pytest.mark.parametrize("batching", ["none", "static", "continuous"])
def test_preemption_under_a_tiny_cache_finishes_every_request_with_the_right_tokens(batching: BatchingMode) -> None:
    """A cache for 1.6 requests: requests are preempted and recomputed, and all produce the same tokens."""
    config = EngineConfig(batching=batching, block_size=4, num_kv_blocks=16, max_model_len=64, max_num_seqs=8)
    requests = make_requests(10, prompt_len=20, num_output_tokens=20)
    expected = reference_outputs(requests)
    scheduler = Scheduler(config)
    trace = simulate(scheduler, requests)
    assert {r.seq.request_id: r.seq.output_token_ids for r in requests} == expected
    assert all(len(tokens) == 20 for tokens in expected.values())
    if batching != "none":
        assert scheduler.num_preemptions > 0 and any(output.preempted for output in trace.outputs)
    assert scheduler.block_manager.num_free_blocks == config.num_kv_blocks


def test_decodes_are_scheduled_before_new_prefills() -> None:
    """With a small budget, every running decode is scheduled first; the new prompt gets what is left."""
    scheduler = Scheduler(EngineConfig(max_num_batched_tokens=8))
    runner = SlotCheckingRunner(scheduler.config.block_size)
    for i in range(3):
        scheduler.add(Sequence(f"d{i}", [i + 1] * 2))
    output = scheduler.schedule()
    scheduler.postprocess(output, runner.run(output))  # all three prefilled, each sampled once
    scheduler.add(Sequence("new", list(range(50))))
    output = scheduler.schedule()
    assert [(e.seq.request_id, e.num_new_tokens) for e in output.scheduled] == [
        ("d0", 1),
        ("d1", 1),
        ("d2", 1),
        ("new", 5),
    ]


def soak_requests(num_requests: int, seed: int) -> list[Request]:
    rng = random.Random(seed)
    system_prompts = [[rng.randrange(VOCAB_SIZE) for _ in range(rng.randint(4, 24))] for _ in range(4)]
    requests = []
    for i in range(num_requests):
        prefix = rng.choice(system_prompts) if rng.random() < 0.6 else []
        prompt = prefix + [rng.randrange(VOCAB_SIZE) for _ in range(rng.randint(1, 40))]
        arrival = i // 4
        abort_after_num_steps = rng.randint(0, 12) if i % 3 == 0 else None
        requests.append(Request(Sequence(f"r{i}", prompt), rng.randint(1, 16), arrival, abort_after_num_steps))
    return requests


@pytest.mark.parametrize("batching", ["continuous", "static", "none"])
def test_no_block_leaks_after_a_thousand_requests_with_random_aborts(batching: BatchingMode) -> None:
    """1,000 random requests, a third aborted at random moments (queued, mid-prefill, mid-step, decoding):
    after every step each block is in exactly one state and ref counts match the block tables; at the
    end every block is free or cached with ref count 0."""
    config = EngineConfig(
        batching=batching, block_size=4, num_kv_blocks=48, max_model_len=96, max_num_seqs=8, max_num_batched_tokens=32
    )
    scheduler = Scheduler(config)
    requests = soak_requests(1000, seed=11)
    expected = reference_outputs(requests)
    simulate(scheduler, requests)
    block_manager = scheduler.block_manager
    assert block_manager.num_free_blocks == config.num_kv_blocks
    assert all(block_manager.ref_count(b) == 0 for b in range(config.num_kv_blocks))
    assert all(r.seq.status is SequenceStatus.FINISHED and not r.seq.block_table for r in requests)
    completed = [r for r in requests if r.abort_after_num_steps is None]
    assert all(r.seq.output_token_ids == expected[r.seq.request_id][: r.num_output_tokens] for r in completed)
    assert all(r.seq.num_output_tokens == r.num_output_tokens for r in completed)
    assert sum(0 < r.seq.num_output_tokens < r.num_output_tokens for r in requests) > 150  # aborted mid-decode
    if batching == "continuous":
        prefix_cache = block_manager.prefix_cache
        assert scheduler.num_preemptions > 0 and prefix_cache.num_hit_tokens > 0 and prefix_cache.num_evicted_blocks > 0


def test_running_decodes_never_starve_behind_prefill_chunks() -> None:
    """In every step that schedules a prefill chunk, every running sequence ready to decode is scheduled too."""
    config = EngineConfig(block_size=4, num_kv_blocks=48, max_model_len=96, max_num_seqs=8, max_num_batched_tokens=32)
    scheduler = Scheduler(config)
    original_schedule = scheduler.schedule
    violations = []

    def checked_schedule() -> SchedulerOutput:
        ready = {s.request_id for s in scheduler.running if s.num_uncomputed_tokens == 1}
        output = original_schedule()
        scheduled = {e.seq.request_id for e in output.scheduled}
        has_prefill = any(e.num_new_tokens > 1 or not e.is_sampling for e in output.scheduled)
        if has_prefill and not (ready - ids(list(output.preempted))) <= scheduled:
            violations.append(output)
        return output

    scheduler.schedule = checked_schedule  # type: ignore[method-assign]
    simulate(scheduler, soak_requests(200, seed=3))
    assert not violations


def test_add_rejects_a_full_queue_and_a_prompt_that_can_never_fit() -> None:
    """can_add / can_ever_fit are the checks; add refuses what they refuse and changes nothing."""
    scheduler = Scheduler(EngineConfig(max_num_waiting=2, block_size=4, num_kv_blocks=8, max_model_len=32))
    assert scheduler.can_ever_fit(32) and not scheduler.can_ever_fit(33)
    with pytest.raises(ValueError, match="max_model_len"):
        scheduler.add(Sequence("huge", [1] * 33))
    scheduler.add(Sequence("a", [1]))
    scheduler.add(Sequence("b", [1]))
    assert not scheduler.can_add()
    with pytest.raises(QueueFullError):
        scheduler.add(Sequence("c", [1]))
    assert scheduler.num_waiting == 2


def test_abort_frees_a_waiting_or_running_sequence_and_ignores_unknown_ids() -> None:
    """abort returns the sequence, marks it finished and leaves no block referenced."""
    scheduler = Scheduler(EngineConfig(max_num_seqs=1))
    running, waiting = Sequence("run", list(range(40))), Sequence("wait", list(range(40)))
    scheduler.add(running)
    scheduler.add(waiting)
    scheduler.schedule()
    assert running.status is SequenceStatus.RUNNING and running.block_table
    assert scheduler.abort("run") is running and scheduler.abort("wait") is waiting
    assert scheduler.abort("run") is None
    assert running.is_finished and waiting.is_finished and not scheduler.has_unfinished()
    assert scheduler.block_manager.num_used_blocks == 0


def test_preemption_frees_the_newest_running_sequence_and_requeues_it_first() -> None:
    """Out of blocks, the newest running sequence is preempted, goes to the front of the queue with its
    generated tokens, and later recomputes prompt + output."""
    scheduler = Scheduler(EngineConfig(block_size=4, num_kv_blocks=6, max_model_len=24))
    runner = SlotCheckingRunner(4)
    seqs = [Sequence(name, [10 * i + t for t in range(7)]) for i, name in enumerate("abc")]
    for seq in seqs:
        scheduler.add(seq)
    scheduler.add(Sequence("late", [99]))
    for _ in range(2):  # prefill (7 tokens -> 8), decode (-> 9): 2 blocks each, the cache is full
        output = scheduler.schedule()
        scheduler.postprocess(output, runner.run(output))
    output = scheduler.schedule()  # each needs a third block
    assert output.preempted == (seqs[2],)
    assert [seq.request_id for seq in scheduler.waiting] == ["c", "late"]
    assert seqs[2].status is SequenceStatus.WAITING and seqs[2].num_preemptions == 1 and not seqs[2].block_table
    assert seqs[2].num_tokens == 9 and seqs[2].num_computed_tokens == 0
    scheduler.postprocess(output, runner.run(output))
    scheduler.finish(seqs[0])
    scheduler.finish(seqs[1])
    num_query_tokens = scheduler.block_manager.prefix_cache.num_query_tokens
    output = scheduler.schedule()  # c comes back; a and b evicted its cached blocks, so all 9 are recomputed
    assert output.scheduled[0] == (seqs[2], 9, True, 0)
    assert scheduler.block_manager.prefix_cache.num_query_tokens == num_query_tokens + 1  # only "late"


def test_each_scheduler_keeps_its_own_arrival_order() -> None:
    """Arrival order is the order of `add` on one scheduler: two schedulers in one process, fed in turn,
    each start their own order, and a sequence no scheduler has queued has no arrival index yet."""
    first, second = Scheduler(EngineConfig()), Scheduler(EngineConfig())
    seqs_first = [Sequence(f"first{i}", [1, 2]) for i in range(3)]
    seqs_second = [Sequence(f"second{i}", [1, 2]) for i in range(3)]
    assert all(seq.arrival_index is None for seq in seqs_first + seqs_second)
    for seq_first, seq_second in zip(seqs_first, seqs_second, strict=True):
        first.add(seq_first)
        second.add(seq_second)
    indices_first = [seq.arrival_index for seq in seqs_first]
    assert indices_first == [seq.arrival_index for seq in seqs_second]
    assert indices_first == sorted(indices_first) and len(set(indices_first)) == 3


def test_preemption_picks_the_last_sequence_added_whatever_the_order_they_were_built_in() -> None:
    """The newest sequence is the one `add`ed last, not the one constructed last."""
    scheduler = Scheduler(EngineConfig(block_size=4, num_kv_blocks=6, max_model_len=24))
    runner = SlotCheckingRunner(4)
    built = {name: Sequence(name, [10 * i + t for t in range(7)]) for i, name in enumerate("cba")}
    for name in "abc":
        scheduler.add(built[name])
    for _ in range(2):  # prefill (7 tokens -> 8), decode (-> 9): 2 blocks each, the cache is full
        output = scheduler.schedule()
        scheduler.postprocess(output, runner.run(output))
    assert scheduler.schedule().preempted == (built["c"],)


def test_a_sequence_the_engine_never_stops_fails_loudly_instead_of_looping() -> None:
    """A sequence grown past the whole cache (the engine ignored max_model_len) raises, naming max_model_len."""
    scheduler = Scheduler(EngineConfig(block_size=4, num_kv_blocks=4, max_model_len=16))
    seq = Sequence("endless", list(range(15)))
    scheduler.add(seq)
    with pytest.raises(RuntimeError, match="max_model_len"):
        for _ in range(10):
            output = scheduler.schedule()
            scheduler.postprocess(output, [1] * len(output.scheduled))
    assert seq.num_tokens == 17
