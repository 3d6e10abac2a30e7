"""Reading real-traffic files: each format, told from its content, and a clear error for every bad one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.replay.formats import DatasetError, Turn, read_dataset

DATA = Path(__file__).resolve().parents[2] / "scenarios" / "data"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def lines(*rows: object) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def test_the_shipped_samples_are_read_in_the_format_their_content_shows() -> None:
    formats = {name: read_dataset(DATA / name).format for name in
               ("prompts.jsonl", "conversations.sharegpt.json", "trace.mooncake.jsonl", "trace.azure.csv")}
    assert formats == {"prompts.jsonl": "jsonl", "conversations.sharegpt.json": "sharegpt",
                       "trace.mooncake.jsonl": "mooncake", "trace.azure.csv": "azure"}


def test_jsonl_prompts_and_chat_messages_with_their_output_lengths(tmp_path) -> None:
    path = write(tmp_path, "p.jsonl", lines(
        {"prompt": "one", "max_tokens": 5},
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                      {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}],
         "output_tokens": 7},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "parts"}]},
                      {"role": "assistant", "content": "recorded answer"}]}) + "\n")
    dataset = read_dataset(path)
    first, second, third = dataset.conversations
    assert (first.turns, first.max_tokens, first.index) == ((Turn("one"),), 5, 1)
    assert second.system == "be brief" and second.history == (("user", "hi"), ("assistant", "hello"))
    assert (second.turns, second.max_tokens) == ((Turn("again"),), 7)
    assert third.turns == (Turn("parts", "recorded answer"),) and third.max_tokens is None
    assert len(dataset.sha256) == 64


def test_sharegpt_turns_pair_each_question_with_its_recorded_answer(tmp_path) -> None:
    path = write(tmp_path, "s.json", json.dumps([
        {"conversations": [{"from": "system", "value": "sys"}, {"from": "gpt", "value": "greeting, not sent"},
                           {"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"},
                           {"from": "human", "value": "q2"}]},
        {"conversations": [{"from": "gpt", "value": "only an answer"}]},
    ]))
    dataset = read_dataset(path)
    (conversation,) = dataset.conversations
    assert conversation.system == "sys"
    assert conversation.turns == (Turn("q1", "a1"), Turn("q2"))
    assert dataset.num_skipped == 1


def test_traces_in_time_order_with_seconds_from_their_own_clock(tmp_path) -> None:
    mooncake = write(tmp_path, "m.jsonl", lines(
        {"timestamp": 1500, "input_length": 600, "output_length": 10, "hash_ids": [0, 1]},
        {"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [0]}))
    trace = read_dataset(mooncake).trace
    assert [(r.index, r.timestamp_s, r.input_tokens, r.hash_ids) for r in trace] == [
        (2, 0.0, 100, (0,)), (1, 1.5, 600, (0, 1))]
    azure = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                     "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.1805900,10,2\n")
    rows = read_dataset(azure).trace
    assert [r.input_tokens for r in rows] == [374, 10] and rows[0].timestamp_s == 0.0
    assert rows[1].timestamp_s == pytest.approx(0.5, abs=1e-6)


@pytest.mark.parametrize("name, text, expected", [
    ("empty.jsonl", "\n  \n", "the file is empty"),
    ("bad.jsonl", lines({"prompt": "ok"}) + "{not json\n", "bad.jsonl:2: not valid JSON"),
    ("field.jsonl", lines({"prompt": "ok"}, {"prompt": ""}),
     "field.jsonl:2: field 'prompt' must be a non-empty string"),
    ("neither.jsonl", lines({"prompt": "ok"}, {"text": "x"}), "neither.jsonl:2: expected a field 'prompt'"),
    ("role.jsonl", lines({"messages": [{"role": "wizard", "content": "x"}]}),
     "role.jsonl:1: messages[0].role 'wizard' is not one of system, developer, user, assistant"),
    ("last.jsonl", lines({"messages": [{"role": "system", "content": "x"}]}), "the last message must be the user's"),
    ("tokens.jsonl", lines({"prompt": "x", "max_tokens": 0}), "field 'max_tokens' must be a whole number >= 1"),
    ("who.json", json.dumps([{"conversations": [{"from": "robot", "value": "x"}]}]),
     "entry 1: conversations[0].from 'robot' is not one of"),
    ("shape.json", json.dumps([{"dialogue": []}]), "entry 1: expected an object with a list 'conversations'"),
    ("none.json", json.dumps([{"conversations": [{"from": "gpt", "value": "x"}]}]),
     "no request in it (sharegpt format; 1 entries without a user turn)"),
    ("trace.jsonl", lines({"timestamp": 0, "input_length": 5, "output_length": 1},
                          {"timestamp": 10, "input_length": 5}),
     "trace.jsonl:2: field 'output_length' must be a whole number >= 1 (got missing)"),
    ("ids.jsonl", lines({"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}),
     "field 'hash_ids' must be a list of whole numbers"),
    ("header.csv", "TIMESTAMP,Tokens\n1,2\n", "the header lacks column(s) ContextTokens, GeneratedTokens"),
    ("time.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,5\n", "time.csv:2: TIMESTAMP 'yesterday'"),
    ("what.jsonl", lines({"question": "x"}),
     "can't tell its format from the first line; name it with --dataset-format"),
])
def test_a_bad_file_is_refused_naming_the_line_and_the_field(tmp_path, name, text, expected) -> None:
    with pytest.raises(DatasetError) as error:
        read_dataset(write(tmp_path, name, text))
    assert expected in str(error.value)


def test_an_error_never_repeats_the_files_text(tmp_path) -> None:
    secret = "the merger closes on friday"
    with pytest.raises(DatasetError) as error:
        read_dataset(write(tmp_path, "s.jsonl", lines({"messages": [{"role": "oracle", "content": secret}]})))
    assert secret not in str(error.value)


def test_a_missing_file_and_a_named_format_that_does_not_fit(tmp_path) -> None:
    with pytest.raises(DatasetError, match="no such file"):
        read_dataset(tmp_path / "nope.jsonl")
    path = write(tmp_path, "p.jsonl", lines({"prompt": "x"}))
    with pytest.raises(DatasetError, match="field 'timestamp' must be a number"):
        read_dataset(path, "mooncake")


@pytest.mark.parametrize(("line", "said"), [
    ('{"prompt": "2+2?", "answer": "4", "grader": "fuzzy"}', "grader 'fuzzy' is not one of exact, contains"),
    ('{"prompt": "2+2?", "grader": "number"}', "field 'grader' needs an 'answer' to grade against"),
    ('{"prompt": "Pick", "answer": "K", "grader": "choice"}', "a choice grader's answer must be a letter A-J"),
    ('{"prompt": "2+2?", "answer": ["4", ""]}', "answer must be a non-empty string or a list of them"),
    ('{"prompt": "2+2?", "answer": "4", "category": 7}', "field 'category' must be a string"),
])
def test_a_graded_line_that_cannot_be_graded_is_refused_naming_the_line_and_the_field(tmp_path, line, said) -> None:
    path = tmp_path / "graded.jsonl"
    path.write_text('{"prompt": "fine", "answer": "yes"}\n' + line + "\n")
    with pytest.raises(DatasetError) as caught:
        read_dataset(path)
    assert f"{path}:2: " in str(caught.value) and said in str(caught.value)


def test_a_graded_line_carries_its_grader_accepted_answers_and_category(tmp_path) -> None:
    path = tmp_path / "graded.jsonl"
    path.write_text('{"prompt": "Capital of France?", "answer": ["Paris", "paris, france"], "grader": "contains", '
                    '"category": "facts"}\n{"prompt": "no answer here"}\n')
    first, second = read_dataset(path).conversations
    assert first.grading is not None and first.grading.grader == "contains"
    assert first.grading.accepted == ("Paris", "paris, france") and first.grading.category == "facts"
    assert second.grading is None
