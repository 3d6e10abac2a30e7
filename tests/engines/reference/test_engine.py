"""LLMEngine: batch invariance, stop rules, streaming text, preemption and aborts, on dummy:tiny in float32.

dummy:tiny has no tokenizer, so the engine gives it the byte-level stand-in (ids 0-255 are bytes,
256 <|endoftext|> = EOS, 258 <|im_end|> = end of turn): text is checked byte for byte.
"""

from __future__ import annotations

import random

import pytest

from engines.reference.core.config import EngineConfig
from engines.reference.core.engine import LLMEngine, RequestOutput
from engines.reference.core.request_state import RequestState
from engines.reference.core.sampling import SamplingParams
from engines.reference.core.sequence import Sequence
from engines.reference.loading.weights import LoadedModel, resolve_model

Result = tuple[tuple[int, ...], str, str | None]  # output token ids, text, finish reason


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return resolve_model("dummy:tiny")


def make_engine(loaded: LoadedModel, **fields: object) -> LLMEngine:
    fields = {"num_kv_blocks": 256, "block_size": 16, "max_model_len": 1024, **fields}
    return LLMEngine(loaded, EngineConfig(**fields))  # type: ignore[arg-type]


def run(engine: LLMEngine, requests: dict[str, tuple[list[int], SamplingParams]], stagger: int = 0) -> dict:
    """Run requests to completion; with `stagger`, each later request joins `stagger` steps after the previous."""
    pending = list(requests.items())
    tokens: dict[str, list[int]] = {rid: [] for rid in requests}
    texts = dict.fromkeys(requests, "")
    reasons: dict[str, str | None] = {}
    step = 0
    while pending or engine.has_unfinished():
        while pending and (stagger == 0 or step % stagger == 0 or not engine.has_unfinished()):
            rid, (prompt, params) = pending.pop(0)
            engine.add_request(rid, prompt, params)
            if stagger:
                break
        for out in engine.step():
            tokens[out.request_id].extend(out.new_token_ids)
            texts[out.request_id] += out.new_text
            if out.finished:
                reasons[out.request_id] = out.finish_reason
        step += 1
    return {rid: (tuple(tokens[rid]), texts[rid], reasons.get(rid)) for rid in requests}


def mixed_requests(num: int, seed: int = 0) -> dict[str, tuple[list[int], SamplingParams]]:
    """Prompts of 1 to 90 tokens, some sharing a 40-token prefix; greedy, 1 to 24 output tokens."""
    rng = random.Random(seed)
    shared = [rng.randrange(512) for _ in range(40)]
    requests = {}
    for i in range(num):
        tail = [rng.randrange(512) for _ in range(rng.randint(1, 50))]
        prompt = shared + tail if i % 3 == 0 else tail + [rng.randrange(512) for _ in range(rng.randint(0, 40))]
        params = SamplingParams(temperature=0, max_tokens=rng.randint(1, 24), ignore_eos=True)
        requests[f"r{i}"] = (prompt, params)
    return requests


_ALONE: dict[int, dict] = {}


def run_alone(loaded: LoadedModel, seed: int) -> dict:
    """Each of mixed_requests(16, seed) run alone on a fresh engine (computed once per seed)."""
    if seed not in _ALONE:
        requests = mixed_requests(16, seed)
        _ALONE[seed] = {rid: run(make_engine(loaded), {rid: request})[rid] for rid, request in requests.items()}
    return _ALONE[seed]


def assert_no_blocks_held(engine: LLMEngine) -> None:
    manager = engine.scheduler.block_manager
    manager.check_integrity()
    assert manager.num_free_blocks == manager.num_blocks
    assert engine.num_unfinished == 0 and not engine.has_unfinished()


@pytest.mark.parametrize("prefix_cache", [True, False], ids=["prefix-cache", "no-prefix-cache"])
@pytest.mark.parametrize("max_num_batched_tokens", [2048, 24], ids=["whole-prefill", "chunked-prefill"])
def test_greedy_tokens_are_the_same_alone_and_in_a_batch_of_16(
    tiny: LoadedModel, prefix_cache: bool, max_num_batched_tokens: int
) -> None:
    """Each of 16 mixed-length requests, joining at different steps, gets the tokens it gets alone."""
    requests, alone = mixed_requests(16), run_alone(tiny, 0)
    engine = make_engine(tiny, enable_prefix_caching=prefix_cache, max_num_batched_tokens=max_num_batched_tokens)
    batched = run(engine, requests, stagger=2)
    assert batched == alone
    assert all(len(tokens) == requests[rid][1].max_tokens for rid, (tokens, _, _) in batched.items())
    assert_no_blocks_held(engine)


def test_a_tiny_kv_cache_preempts_and_still_gives_the_same_tokens(tiny: LoadedModel) -> None:
    """12 blocks of 16 tokens for 16 requests: sequences are preempted and recomputed, outputs unchanged."""
    requests, alone = mixed_requests(16, seed=1), run_alone(tiny, 1)
    engine = make_engine(tiny, num_kv_blocks=12, max_model_len=192)
    assert run(engine, requests) == alone
    assert engine.stats().num_preemptions > 0
    assert_no_blocks_held(engine)


def test_seeded_sampling_is_reproducible_and_batch_invariant(tiny: LoadedModel) -> None:
    params = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, seed=1234, max_tokens=20, ignore_eos=True)
    prompt = list(range(30, 60))
    alone = run(make_engine(tiny), {"s": (prompt, params)})["s"]
    assert run(make_engine(tiny), {"s": (prompt, params)})["s"] == alone
    others = {k: (p, SamplingParams(temperature=1.0, max_tokens=10)) for k, (p, _) in mixed_requests(6).items()}
    assert run(make_engine(tiny), {**others, "s": (prompt, params)})["s"] == alone


def test_prefix_cache_reports_cached_tokens_for_a_shared_prefix(tiny: LoadedModel) -> None:
    engine = make_engine(tiny)
    prefix = list(range(100, 164))  # 4 full blocks
    params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
    outputs: list[RequestOutput] = []
    for rid, tail in (("a", [1, 2, 3]), ("b", [4, 5])):
        engine.add_request(rid, prefix + tail, params)
        while engine.has_unfinished():
            outputs += engine.step()
    first, second = outputs[0], outputs[-1]
    assert (first.num_cached_tokens, second.num_cached_tokens) == (0, 64)
    stats = engine.stats()
    assert stats.num_prefix_cache_hit_tokens == 64 and stats.num_prefix_cache_query_tokens == 67 + 66


def test_max_tokens_and_max_model_len_finish_with_length(tiny: LoadedModel) -> None:
    engine = make_engine(tiny, max_model_len=40)
    results = run(
        engine,
        {
            "max_tokens": (list(range(10)), SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)),
            "context": (list(range(30)), SamplingParams(temperature=0, max_tokens=None, ignore_eos=True)),
        },
    )
    assert len(results["max_tokens"][0]) == 5 and results["max_tokens"][2] == "length"
    assert len(results["context"][0]) == 10 and results["context"][2] == "length"
    with pytest.raises(ValueError, match="maximum context length"):
        engine.add_request("too-long", list(range(40)), SamplingParams())


def test_stop_token_ids_and_eos_finish_with_stop_and_min_tokens_defers_them(tiny: LoadedModel) -> None:
    greedy = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    prompt = list(range(200, 220))
    tokens = run(make_engine(tiny), {"g": (prompt, greedy)})["g"][0]
    stop_id, index = tokens[3], tokens.index(tokens[3])
    stopped = run(
        make_engine(tiny), {"s": (prompt, SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[stop_id]))}
    )
    assert stopped["s"][0] == tokens[: index + 1] and stopped["s"][2] == "stop"
    # min_tokens bans the stop token until reached, so the output diverges but is at least that long
    deferred = SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[stop_id], min_tokens=index + 3)
    result = run(make_engine(tiny), {"m": (prompt, deferred)})["m"]
    assert len(result[0]) >= index + 3 and stop_id not in result[0][: index + 3]


def test_eos_and_end_of_turn_stop_unless_ignore_eos(tiny: LoadedModel) -> None:
    """Near-uniform seeded sampling hits an end token (256 or 258); without ignore_eos the same draws stop there."""
    engine = make_engine(tiny)
    assert engine.tokenizer.eos_token_id == 256 and 258 in engine.tokenizer.stop_token_ids
    prompt = list(range(5, 25))
    params = SamplingParams(temperature=5.0, seed=1, max_tokens=60, ignore_eos=True)
    tokens, _, reason = run(engine, {"g": (prompt, params)})["g"]
    assert len(tokens) == 60 and reason == "length"
    first_end = next(i for i, t in enumerate(tokens) if t in (256, 258))
    plain = SamplingParams(temperature=5.0, seed=1, max_tokens=60)
    stopped = run(make_engine(tiny), {"e": (prompt, plain)})["e"]
    assert stopped[0] == tokens[: first_end + 1] and stopped[2] == "stop"


def test_stop_string_cuts_the_text_before_it(tiny: LoadedModel) -> None:
    params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    prompt = [ord(c) for c in "The quick brown fox"]
    tokens, text, _ = run(make_engine(tiny), {"g": (prompt, params)})["g"]
    candidates = [
        k for k in range(1, len(text) - 2) if text.find(text[k : k + 2]) == k and "\ufffd" not in text[k : k + 2]
    ]
    assert candidates, f"greedy text too short to pick a stop string from: {text!r}"
    k = candidates[len(candidates) // 2]
    stop = text[k : k + 2]
    stopped = run(make_engine(tiny), {"s": (prompt, SamplingParams(temperature=0, max_tokens=60, stop=[stop]))})["s"]
    assert stopped[1] == text[:k] and stopped[2] == "stop"
    assert tokens[: len(stopped[0])] == stopped[0]


def _state(tiny: LoadedModel, params: SamplingParams) -> tuple[RequestState, Sequence]:
    engine = make_engine(tiny)
    seq = Sequence("x", [1, 2, 3], sampling_params=params)
    state = RequestState(seq, params, None, engine.tokenizer, frozenset({256, 258}), 0.0)
    return state, seq


def _push(state: RequestState, seq: Sequence, text: str) -> list[tuple[str, str | None]]:
    results = []
    for byte in text.encode():
        seq.token_ids.append(byte)
        results.append(state.append_token(byte, max_model_len=1000))
    return results


def test_text_that_may_start_a_stop_string_is_held_back_until_it_cannot(tiny: LoadedModel) -> None:
    state, seq = _state(tiny, SamplingParams(max_tokens=100, stop=["abc", "xyz"]))
    assert _push(state, seq, "1ab") == [("1", None), ("", None), ("", None)]
    assert _push(state, seq, "d") == [("abd", None)]
    assert _push(state, seq, "xyabc") == [("", None), ("", None), ("xy", None), ("", None), ("", "stop")]
    assert state.text[: state.num_emitted_chars] == "1abdxy"


def test_incomplete_utf8_is_held_back_and_the_stop_token_text_never_emitted(tiny: LoadedModel) -> None:
    state, seq = _state(tiny, SamplingParams(max_tokens=100))
    assert _push(state, seq, "é€") == [("", None), ("é", None), ("", None), ("", None), ("€", None)]
    seq.token_ids.append(258)
    assert state.append_token(258, max_model_len=1000) == ("", "stop")


def test_abort_frees_blocks_between_steps(tiny: LoadedModel) -> None:
    engine = make_engine(tiny)
    for i in range(6):
        engine.add_request(f"a{i}", list(range(i, i + 40)), SamplingParams(temperature=0, max_tokens=50))
    for _ in range(3):
        engine.step()
    assert engine.abort("a0") and engine.abort("a5") and not engine.abort("unknown")
    while engine.has_unfinished():
        outputs = engine.step()
        for out in outputs:
            if out.request_id == "a1" and not out.finished:
                assert engine.abort("a1")
    assert_no_blocks_held(engine)


def test_add_request_rejects_bad_prompts(tiny: LoadedModel) -> None:
    engine = make_engine(tiny)
    with pytest.raises(ValueError, match="at least one token"):
        engine.add_request("e", [], SamplingParams())
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.add_request("v", [1, 512], SamplingParams())
    engine.add_request("d", [1], SamplingParams())
    with pytest.raises(ValueError, match="already in use"):
        engine.add_request("d", [1], SamplingParams())
    assert engine.stats().num_requests_added == 1  # a refused request was never accepted


def test_batching_none_and_static_give_the_same_greedy_tokens(tiny: LoadedModel) -> None:
    requests = mixed_requests(6, seed=2)
    expected = run(make_engine(tiny), requests)
    for batching in ("none", "static"):
        engine = make_engine(tiny, batching=batching, max_num_seqs=4)
        assert run(engine, requests) == expected
        assert_no_blocks_held(engine)
