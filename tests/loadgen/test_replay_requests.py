"""A dataset -> the requests sent: lengths, sampling, filters, the context check, trace prompts' shared blocks."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from loadgen.replay.blocks import BlockPrompts
from loadgen.replay.formats import DatasetError, read_dataset
from loadgen.replay.requests import check_context, describe, prepare_replay, replay_requests
from loadgen.workload import DatasetSettings, LengthDistribution

DEFAULT_OUTPUT = LengthDistribution(value=9)


class WordTokenizer:
    """A tokenizer where a token is a word: lengths become exact and easy to state."""

    def count(self, text: str) -> int:
        return len(text.split())

    def count_and_cut(self, text: str, num_tokens: int) -> tuple[str, int]:
        words = text.split()
        return " ".join(words[:num_tokens]), min(len(words), num_tokens)


def replay_of(tmp_path: Path, rows: list[dict], tokenizer=None, **settings):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return prepare_replay(read_dataset(path), DatasetSettings(path=str(path), **settings), DEFAULT_OUTPUT, 0,
                          tokenizer)


def test_output_lengths_come_from_max_tokens_then_the_recorded_answer_then_the_workload(tmp_path) -> None:
    replay = replay_of(tmp_path, [
        {"prompt": "a b c", "max_tokens": 4},
        {"messages": [{"role": "user", "content": "d e"}, {"role": "assistant", "content": "one two three"}]},
        {"prompt": "f"}], tokenizer=WordTokenizer())
    specs = list(replay_requests(replay, "chat", cycle=False))
    assert [(s.input_tokens_target, s.max_tokens) for s in specs] == [(3, 4), (2, 3), (1, 9)]
    assert [s.dataset_index for s in specs] == [1, 2, 3]
    assert describe(replay).lengths == "counted with the tokenizer"


def test_without_a_tokenizer_lengths_are_estimated_and_the_dataset_says_so(tmp_path) -> None:
    replay = replay_of(tmp_path, [{"prompt": "x" * 40}])
    (spec,) = replay_requests(replay, "chat", cycle=False)
    assert spec.input_tokens_target == 10
    assert "estimated" in describe(replay).lengths


def test_sampling_is_seeded_and_keeps_the_files_order(tmp_path) -> None:
    rows = [{"prompt": f"prompt {i}"} for i in range(50)]
    first = replay_of(tmp_path, rows, sample=10)
    again = replay_of(tmp_path, rows, sample=10)
    indexes = [item.index for item in first.items]
    assert indexes == [item.index for item in again.items] and indexes == sorted(indexes) and len(indexes) == 10
    assert "10 of 50 sampled (seed 0)" in first.notes


def test_longer_prompts_are_left_out_and_nothing_left_is_an_error(tmp_path) -> None:
    rows = [{"prompt": "a " * 5}, {"prompt": "a " * 50}]
    replay = replay_of(tmp_path, rows, tokenizer=WordTokenizer(), max_input_tokens=10)
    assert [item.index for item in replay.items] == [1]
    assert "1 of 2 longer than 10 input tokens left out" in replay.notes
    with pytest.raises(DatasetError, match="no request left to send after --max-input-tokens 2"):
        replay_of(tmp_path, rows, tokenizer=WordTokenizer(), max_input_tokens=2)


def test_a_request_over_the_models_context_is_named_with_its_line(tmp_path) -> None:
    replay = replay_of(tmp_path, [{"prompt": "a " * 5, "max_tokens": 5}, {"prompt": "a " * 500, "max_tokens": 20}],
                       tokenizer=WordTokenizer())
    check_context(replay, 1000)
    with pytest.raises(DatasetError, match=r"1 request\(s\) need more than the model's context of 256 tokens .* "
                                           r"e\.g\. line 2 \(520 tokens\); leave them out with --max-input-tokens"):
        check_context(replay, 256)


def test_sharegpt_replays_its_human_turns_in_order_single_or_turn_by_turn(tmp_path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "a b"},
                           {"from": "human", "value": "q2"}, {"from": "gpt", "value": "c"},
                           {"from": "human", "value": "q3"}]},
        {"conversations": [{"from": "human", "value": "r1"}, {"from": "gpt", "value": "d e f"}]}]))
    dataset = read_dataset(path)

    def sent(**settings):
        replay = prepare_replay(dataset, DatasetSettings(path=str(path), **settings), DEFAULT_OUTPUT, 0,
                                WordTokenizer())
        return list(replay_requests(replay, "chat", cycle=False))

    assert [(s.prompt, s.max_tokens, s.turn) for s in sent()] == [("q1", 2, None), ("r1", 3, None)]
    turns = sent(turns="all")
    assert [(s.prompt, s.conversation_id, s.turn, s.max_tokens) for s in turns] == [
        ("q1", 0, 1, 2), ("q2", 0, 2, 1), ("q3", 0, 3, 9), ("r1", 1, 1, 3)]
    assert [s.prompt for s in sent(turns=2)] == ["q1", "q2", "r1"]


def test_the_stream_cycles_with_fresh_request_ids_when_a_sweep_outlasts_the_file(tmp_path) -> None:
    replay = replay_of(tmp_path, [{"prompt": "one"}, {"prompt": "two"}])
    specs = list(itertools.islice(replay_requests(replay, "chat"), 5))
    assert [s.prompt for s in specs] == ["one", "two", "one", "two", "one"]
    assert [s.request_id for s in specs] == [0, 1, 2, 3, 4]
    assert specs[0].prompt_sha256 == specs[2].prompt_sha256 and specs[0].prompt_sha256 != specs[1].prompt_sha256


def test_trace_prompts_share_exactly_the_blocks_their_hash_ids_share() -> None:
    blocks = BlockPrompts(block_tokens=8, seed=0)
    a = blocks.blocks_of(blocks.prompt(30, (1, 2, 3, 4), request_key=1))
    b = blocks.blocks_of(blocks.prompt(20, (1, 2, 9), request_key=2))
    c = blocks.blocks_of(blocks.prompt(20, (), request_key=3))
    assert [len(block.split()) for block in a] == [8, 8, 8, 6] and [len(x.split()) for x in b] == [8, 8, 4]
    assert a[:2] == b[:2] and a[2][:len(b[2])] != b[2]
    assert not set(c) & set(a + b)  # no hash ids: blocks of its own
    assert BlockPrompts(8, seed=0).prompt(30, (1, 2, 3, 4), 1) == blocks.prompt(30, (1, 2, 3, 4), 1)  # seeded


def test_with_a_tokenizer_trace_blocks_are_built_of_single_token_words() -> None:
    class CountsLetters(WordTokenizer):  # words of up to 3 letters are one token
        def count(self, text: str) -> int:
            return sum(1 + len(word) // 4 for word in text.split())

    blocks = BlockPrompts(block_tokens=16, seed=0, tokenizer=CountsLetters())
    prompt = blocks.prompt(40, (7,), request_key=1)
    assert CountsLetters().count(prompt) == 40 and all(len(word) <= 3 for word in prompt.split())


def test_a_trace_window_keeps_its_piece_with_times_from_its_start(tmp_path) -> None:
    rows = [{"timestamp": t * 1000, "input_length": 10, "output_length": 2} for t in range(10)]
    replay = replay_of(tmp_path, rows, window=(3.0, 6.0))
    assert [item.arrival_s for item in replay.items] == [0.0, 1.0, 2.0]
    assert describe(replay).span_s == 2.0
