"""Steps sized by time: the step cost is learned from the steps run, and a step that holds decodes takes only
the prompt tokens that keep it within the time target (its first chunk never below the floor), while a step
without decodes takes the token budget whole."""

from __future__ import annotations

import dataclasses

import pytest

from engines.reference.core.config import ConfigError, EngineConfig
from engines.reference.core.engine import LLMEngine
from engines.reference.core.sampling import SamplingParams
from engines.reference.core.scheduler import Scheduler
from engines.reference.core.sequence import Sequence
from engines.reference.core.step_cost import StepCost, StepCostModel, StepShape
from engines.reference.loading.weights import resolve_model
from engines.reference.serving.options import parse_args
from engines.reference.serving.server import build_engine, step_cost_line

TRUE = StepCost(fixed_ms=5.0, decode_row_ms=2.0, prefill_token_ms=0.5, attention_ms_per_kilopair=0.01)


def _shapes() -> list[StepShape]:
    return [StepShape(rows, tokens, (rows + tokens) * context) for rows in (0, 1, 4, 16) for tokens in (0, 64, 512)
            for context in (100, 1500) if rows or tokens]


def _learned(cost: StepCost = TRUE) -> StepCostModel:
    model = StepCostModel(refit_every=1)
    for shape in _shapes() * 2:
        model.observe(shape, cost.of(shape))
    return model


def test_the_fit_finds_each_figure_of_an_exactly_linear_cost() -> None:
    fitted = _learned().cost
    assert fitted is not None
    for name in ("fixed_ms", "decode_row_ms", "prefill_token_ms", "attention_ms_per_kilopair"):
        assert getattr(fitted, name) == pytest.approx(getattr(TRUE, name), rel=0.02, abs=1e-3), name


def test_a_window_of_alike_decode_steps_leaves_the_prefill_figure_where_it_was() -> None:
    model = _learned()
    for _ in range(300):  # a whole window of one shape: on its own it says nothing about prompt tokens
        model.observe(StepShape(8, 0, 8 * 300), TRUE.of(StepShape(8, 0, 8 * 300)))
    assert model.cost is not None and model.cost.prefill_token_ms == pytest.approx(TRUE.prefill_token_ms, rel=0.1)


def test_nothing_is_said_before_a_fit_and_nothing_fits_past_the_target() -> None:
    assert StepCostModel().prefill_tokens_within(100.0, StepShape(4), 0) is None
    model = _learned()
    decodes = StepShape(10, 0, 10 * 300)  # 5 + 20 + 0.03 ms
    assert model.prefill_tokens_within(100.0, decodes, 0) == int((100 - TRUE.of(decodes)) / 0.5)
    assert model.prefill_tokens_within(20.0, decodes, 0) == 0


def _scheduler(cost: StepCostModel | None, **fields: object) -> Scheduler:
    config = EngineConfig(**{"num_kv_blocks": 512, "block_size": 16, "max_model_len": 4096, "max_step_ms": 100.0,
                             "max_step_ratio": None, "min_prefill_chunk_tokens": 16, **fields})  # type: ignore[arg-type]
    return Scheduler(config, step_cost=cost)


def _decoding(scheduler: Scheduler, count: int) -> None:
    """`count` sequences whose prompts are computed, each with one sampled token to decode next."""
    for i in range(count):
        scheduler.add(Sequence(f"d{i}", [1 + i] * 8))
    out = scheduler.schedule()
    scheduler.postprocess(out, [7] * len(out.scheduled))
    assert all(seq.num_uncomputed_tokens == 1 for seq in scheduler.running)


def test_beside_decodes_a_long_prompt_gets_the_chunk_the_time_target_leaves() -> None:
    model = _learned()
    scheduler = _scheduler(model)
    _decoding(scheduler, 10)
    scheduler.add(Sequence("long", list(range(3000))))
    out = scheduler.schedule()
    chunks = {entry.seq.request_id: entry.num_new_tokens for entry in out.scheduled}
    assert all(chunks[f"d{i}"] == 1 for i in range(10))  # every decode first
    decodes = StepShape(10, 0, sum(e.num_new_tokens * (e.seq.num_computed_tokens + 1) for e in out.scheduled
                                   if e.seq.request_id != "long"))
    expected = model.prefill_tokens_within(100.0, decodes, 0)
    assert expected is not None and 16 < expected < 2048 - 10  # the time decides, not the token budget
    assert chunks["long"] == expected
    assert TRUE.of(out.shape) <= 100.0 < TRUE.of(dataclasses.replace(out.shape, num_prefill_tokens=expected + 1))


def test_beside_a_small_fast_batch_a_step_stays_within_the_ratio_of_its_decodes() -> None:
    """Two decode rows take 9 ms, far below the 100 ms target: the step may take max_step_ratio times that, so a
    prompt beside them makes no gap many times the others; the target still bounds a larger batch."""
    model = _learned()
    for rows, ratio in ((2, 2.5), (2, 4.0), (20, 2.5)):
        scheduler = _scheduler(model, max_step_ratio=ratio, min_prefill_share=0.0)
        _decoding(scheduler, rows)
        scheduler.add(Sequence("long", list(range(3000))))
        out = scheduler.schedule()
        decodes = StepShape(rows, 0, sum(e.seq.num_computed_tokens + 1 for e in out.scheduled
                                         if e.seq.request_id != "long"))
        budget_ms = min(100.0, ratio * TRUE.of(decodes))
        chunk = next(e.num_new_tokens for e in out.scheduled if e.seq.request_id == "long")
        assert chunk == model.prefill_tokens_within(budget_ms, decodes, 0) > 16
        # (within the attention of the chunk to itself, which the scheduler counts at the context's end)
        assert TRUE.of(out.shape) <= budget_ms + chunk * chunk * TRUE.attention_ms_per_kilopair / 1000
        assert budget_ms < TRUE.of(dataclasses.replace(out.shape, num_prefill_tokens=chunk + 1))
    assert budget_ms == 100.0 and TRUE.of(StepShape(2)) * 4.0 < 100.0  # both bounds were met above


def test_past_the_target_a_prompt_still_gets_the_floor_and_a_second_one_waits() -> None:
    scheduler = _scheduler(_learned(), max_step_ms=10.0, min_prefill_share=0.0)  # 10 decode rows alone: 25 ms
    _decoding(scheduler, 10)
    scheduler.add(Sequence("first", list(range(500))))
    scheduler.add(Sequence("second", list(range(600, 1100))))
    out = scheduler.schedule()
    chunks = {entry.seq.request_id: entry.num_new_tokens for entry in out.scheduled}
    assert chunks["first"] == 16 and "second" not in chunks
    assert [seq.request_id for seq in scheduler.waiting] == ["second"]  # not admitted to hold blocks idle


def test_past_the_target_prompts_get_their_share_of_the_step() -> None:
    """The decodes alone take longer than the target: prompts still take min_prefill_share of the step's time
    (with 0.5, as long as the decodes), so new users are not starved by running ones."""
    model = _learned()
    scheduler = _scheduler(model, max_step_ms=10.0, min_prefill_share=0.5)
    _decoding(scheduler, 10)
    scheduler.add(Sequence("long", list(range(3000))))
    out = scheduler.schedule()
    decodes = [entry for entry in out.scheduled if entry.num_new_tokens == 1]
    decodes_ms = TRUE.of(StepShape(10, 0, sum(e.seq.num_computed_tokens + 1 for e in decodes)))
    chunk = next(entry.num_new_tokens for entry in out.scheduled if entry.seq.request_id == "long")
    assert chunk == model.prefill_tokens_within(2 * decodes_ms, StepShape(10, 0, 10 * 9), 0) > 16
    assert TRUE.of(out.shape) == pytest.approx(2 * decodes_ms, abs=TRUE.prefill_token_ms + 0.1)


def test_a_step_without_decodes_takes_the_token_budget_whole() -> None:
    scheduler = _scheduler(_learned(), max_step_ms=1.0, max_num_batched_tokens=512)
    scheduler.add(Sequence("alone", list(range(3000))))
    assert [entry.num_new_tokens for entry in scheduler.schedule().scheduled] == [512]


def test_without_a_fit_or_a_target_the_token_budget_decides() -> None:
    for scheduler in (_scheduler(None), _scheduler(StepCostModel()), _scheduler(_learned(), max_step_ms=None)):
        _decoding(scheduler, 4)
        scheduler.add(Sequence("long", list(range(3000))))
        chunks = {entry.seq.request_id: entry.num_new_tokens for entry in scheduler.schedule().scheduled}
        assert chunks["long"] == 2048 - 4


def test_in_a_wave_a_step_takes_the_token_budget_whatever_the_time() -> None:
    """Two users decode and six wait for their prompt (a wave came in at once): with wave_share 0.5 (the
    default) the step takes prompts up to the token budget; once most users decode, time decides again."""
    model = _learned()
    scheduler = _scheduler(model, max_step_ms=10.0, min_prefill_share=0.0, max_num_batched_tokens=1024,
                           wave_share=0.5)
    _decoding(scheduler, 2)
    for i in range(6):
        scheduler.add(Sequence(f"p{i}", list(range(i * 1000, i * 1000 + 300))))
    out = scheduler.schedule()
    assert out.num_batched_tokens == 1024 and TRUE.of(out.shape) > 10 * 10.0  # far past the target
    chunks = {entry.seq.request_id: entry.num_new_tokens for entry in out.scheduled}
    assert chunks == {"d0": 1, "d1": 1, "p0": 300, "p1": 300, "p2": 300, "p3": 1024 - 2 - 900}
    scheduler.postprocess(out, [7] * len(out.scheduled))
    # 5 decoding against p3 (part computed), p4 and p5: no longer a wave, so the time target decides again
    chunk = next(e.num_new_tokens for e in scheduler.schedule().scheduled if e.seq.request_id == "p3")
    assert chunk == 16  # the floor (min_prefill_chunk_tokens): the 5 decodes alone take the 10 ms


def test_without_a_wave_share_the_time_target_holds_in_a_wave() -> None:
    scheduler = _scheduler(_learned(), max_step_ms=10.0, min_prefill_share=0.0, wave_share=None)
    _decoding(scheduler, 2)
    for i in range(6):
        scheduler.add(Sequence(f"p{i}", list(range(i * 1000, i * 1000 + 300))))
    chunks = {entry.seq.request_id: entry.num_new_tokens for entry in scheduler.schedule().scheduled}
    assert chunks == {"d0": 1, "d1": 1, "p0": 16}


def test_bad_targets_are_named() -> None:
    for value in (0, -5.0, "fast", True):
        with pytest.raises(ConfigError, match="max_step_ms must be a number of milliseconds > 0"):
            EngineConfig(max_step_ms=value)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="min_prefill_chunk_tokens must be an integer >= 1"):
        EngineConfig(min_prefill_chunk_tokens=0)
    for ratio in (1.0, 0.5, "double", False):
        with pytest.raises(ConfigError, match="max_step_ratio must be a number > 1"):
            EngineConfig(max_step_ratio=ratio)  # type: ignore[arg-type]
    for share in (1.0, -0.1, "half"):
        with pytest.raises(ConfigError, match="min_prefill_share must be a share of a step's time"):
            EngineConfig(min_prefill_share=share)  # type: ignore[arg-type]
    for wave in (1, 1.5, -0.1, "most", True):
        with pytest.raises(ConfigError, match="wave_share must be a share of the users"):
            EngineConfig(wave_share=wave)  # type: ignore[arg-type]


@pytest.mark.serial  # the fit is of real step times: beside another test worker it once found prompt tokens free
def test_the_engine_cuts_a_prompt_beside_decodes_by_the_cost_it_measured() -> None:
    """On a real model: after the warm-up, a step holding decodes and a long prompt computes as many prompt
    tokens as the engine's own learned cost allows within the target; the counters say nothing of the warm-up."""
    engine = LLMEngine(resolve_model("dummy:tiny"), EngineConfig(num_kv_blocks=512, max_model_len=4096,
                                                                 min_prefill_chunk_tokens=1, min_prefill_share=0.0))
    learned = engine.warm_up()
    for _ in range(5):  # dummy:tiny's steps are so short that a noisy moment can fit prompt tokens as free
        if learned is not None and learned.prefill_token_ms > 0:
            break
        learned = engine.warm_up()
    assert learned is not None and learned.prefill_token_ms > 0
    assert engine.stats().num_generation_tokens == 0 == engine.stats().num_requests_added
    params = SamplingParams(temperature=0, max_tokens=50, ignore_eos=True)
    for i in range(6):
        engine.add_request(f"d{i}", [10 + i] * 20, params)
    for _ in range(4):  # their prompts and a first token each, then decodes
        engine.step()
    cost = engine.step_cost.cost
    assert cost is not None
    shape = StepShape(6, 0, sum(seq.num_computed_tokens + 1 for seq in engine.scheduler.running))
    target = cost.of(shape) + 40 * cost.prefill_token_ms  # room for about 40 prompt tokens beside the decodes
    engine.config = engine.scheduler.config = dataclasses.replace(engine.config, max_step_ms=target,
                                                                  max_step_ratio=None)
    engine.add_request("long", [i % 500 for i in range(1000)], params)
    expected = engine.step_cost.prefill_tokens_within(target, shape, 0)
    engine.step()
    stats = engine.stats()
    assert stats.last_step_shape is not None and stats.last_step_shape.num_decode_rows == 6
    assert stats.last_step_shape.num_prefill_tokens == expected and 30 <= expected <= 41


def test_the_wave_share_flag_reaches_the_scheduler_and_one_turns_it_off() -> None:
    loaded = resolve_model("dummy:tiny")
    for args, expected in (([], 0.5), (["--wave-share", "0.75"], 0.75), (["--wave-share", "1"], None)):
        engine = build_engine(parse_args(["--kv-cache-tokens", "4096", *args]), loaded)
        assert engine.scheduler.config.wave_share == expected, args
        assert ("--wave-share" in step_cost_line(None, engine.config)) == (expected is not None)
