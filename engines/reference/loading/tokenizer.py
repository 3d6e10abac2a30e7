"""Tokenizer for the reference engine: text <-> token ids, chat templates and streaming detokenization.

Contract: built from a GGUF file's `tokenizer.ggml.*` metadata (byte-level BPE, via the `tokenizers`
library) or from a Hugging Face `tokenizer.json` (+ tokenizer_config.json); `byte_tokenizer` is the
stand-in for models that have none (dummy weights). Chat templates render in a sandboxed jinja2
environment. `IncrementalDetokenizer` turns a stream of ids into text deltas and never emits a partial
UTF-8 character. Nothing here knows about models, requests or scheduling.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import gguf
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as Backend

from engines.reference.loading.gguf_file import gguf_field, gguf_origin, open_gguf

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = _LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
_DIGIT_FIRST = ("smollm", "starcoder", "refact", "codeshell", "exaone", "minerva", "command-r")
_SPECIAL_TYPES = (gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED)


def _pre_tokenizer(pre: str | None) -> pre_tokenizers.PreTokenizer:
    """The pre-tokenizer llama.cpp uses for a `tokenizer.ggml.pre` name (GPT-2's for unknown names)."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _DIGIT_FIRST:
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    split = {"llama-bpe": _LLAMA3_SPLIT, "llama3": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT}.get(pre or "")
    if split is not None:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    if pre not in (None, "default", "gpt-2", "gpt2"):
        warnings.warn(f"GGUF tokenizer.ggml.pre {pre!r} unknown; using GPT-2 pre-tokenization", stacklevel=3)
    return byte_level


@dataclass(frozen=True)
class Tokenizer:
    backend: Backend
    bos_token_id: int | None
    eos_token_id: int | None
    chat_template: str | None = None
    add_bos_token: bool = False  # prepend BOS in encode (GGUF); tokenizer.json has its own post-processor
    stop_token_ids: tuple[int, ...] = field(default=())  # ids that end generation (eos, end-of-turn)

    @classmethod
    def from_gguf(cls, source: str | Path | gguf.GGUFReader) -> Tokenizer:
        """The `tokenizer.ggml.*` metadata's tokenizer; each value checked, errors naming the file and the key."""
        reader = source if isinstance(source, gguf.GGUFReader) else open_gguf(source)
        vocabulary = _GgufVocabulary(reader)
        try:
            backend = Backend(models.BPE(vocab={t: i for i, t in enumerate(vocabulary.tokens)},
                                        merges=vocabulary.merges))
        except Exception as exc:  # the tokenizers library's own error, e.g. a merge of tokens not in the vocabulary
            raise vocabulary.error("tokenizer.ggml.merges", f"not a BPE of these tokens ({str(exc)[:120]})") from None
        backend.pre_tokenizer = _pre_tokenizer(vocabulary.text("tokenizer.ggml.pre"))
        backend.decoder = decoders.ByteLevel()
        specials = [
            AddedToken(vocabulary.tokens[i], special=True, normalized=False)
            for i, kind_id in enumerate(vocabulary.types)
            if kind_id in _SPECIAL_TYPES
        ]
        backend.add_special_tokens(specials)
        eos = vocabulary.token_id("tokenizer.ggml.eos_token_id")
        stops = [eos, vocabulary.token_id("tokenizer.ggml.eot_token_id"),
                 vocabulary.token_id("tokenizer.ggml.eom_token_id")]
        return cls(
            backend=backend,
            bos_token_id=vocabulary.token_id("tokenizer.ggml.bos_token_id"),
            eos_token_id=eos,
            chat_template=vocabulary.template(),
            add_bos_token=bool(gguf_field(reader, "tokenizer.ggml.add_bos_token", False)),
            stop_token_ids=tuple(dict.fromkeys(s for s in stops if s is not None)),
        )

    @classmethod
    def from_pretrained_dir(cls, directory: str | Path) -> Tokenizer:
        """tokenizer.json, with tokenizer_config.json / chat_template.jinja / generation_config.json if present."""
        directory = Path(directory)
        backend = Backend.from_file(str(directory / "tokenizer.json"))
        config = _read_json(directory / "tokenizer_config.json")
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if (directory / "chat_template.jinja").is_file():
            template = (directory / "chat_template.jinja").read_text()
        bos = _token_id(backend, config.get("bos_token"))
        eos = _token_id(backend, config.get("eos_token"))
        generation_eos = _read_json(directory / "generation_config.json").get("eos_token_id")
        extra = generation_eos if isinstance(generation_eos, list) else [generation_eos]
        stops = tuple(dict.fromkeys(i for i in [eos, *extra] if i is not None))
        return cls(backend, bos, eos, template, add_bos_token=False, stop_token_ids=stops)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        if add_special_tokens and self.add_bos_token and self.bos_token_id is not None:
            if not ids or ids[0] != self.bos_token_id:
                ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int | None) -> str:
        return "" if token_id is None else (self.backend.id_to_token(token_id) or "")

    def apply_chat_template(
        self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True, **kwargs: Any
    ) -> str:
        """Render the chat template (sandboxed jinja2) with HF's usual variables and helpers."""
        if not self.chat_template:
            raise ValueError("this tokenizer has no chat template; send a plain completion prompt instead")
        return _compile(self.chat_template).render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.token_text(self.bos_token_id),
            eos_token=self.token_text(self.eos_token_id),
            **kwargs,
        )


class _GgufVocabulary:
    """A GGUF file's `tokenizer.ggml.*` values, each checked for its kind: byte-level BPE tokens (strings), as many
    token types (numbers), merges ("a b"), token ids within the vocabulary, a chat template that compiles."""

    def __init__(self, reader: gguf.GGUFReader) -> None:
        self.reader, self.origin = reader, gguf_origin(reader)
        kind = gguf_field(reader, "tokenizer.ggml.model")
        if kind != "gpt2":
            raise self.error("tokenizer.ggml.model", f"{str(kind)[:40]!r} is not supported (accepted: 'gpt2' "
                             "byte-level BPE); load the model from a directory with tokenizer.json instead")
        self.tokens: list[str] = self._list("tokenizer.ggml.tokens", str, "strings", None)
        if not self.tokens:
            raise self.error("tokenizer.ggml.tokens", "missing or empty; expected the vocabulary's tokens")
        self.types: list[int] = self._list("tokenizer.ggml.token_type", int, "numbers",
                                           [gguf.TokenType.NORMAL] * len(self.tokens))
        if len(self.types) != len(self.tokens):
            raise self.error("tokenizer.ggml.token_type",
                             f"has {len(self.types)} entries for {len(self.tokens)} tokens")
        merges: list[str] = self._list("tokenizer.ggml.merges", str, "strings", [])
        if not all(" " in m for m in merges):
            raise self.error("tokenizer.ggml.merges", "expected merges written 'left right'")
        self.merges = [tuple(m.split(" ", 1)) for m in merges]

    def error(self, key: str, problem: str) -> ValueError:
        return ValueError(f"{self.origin}: GGUF {key} {problem}")

    def _list(self, key: str, kind: type, said: str, default: list[Any] | None) -> list[Any]:
        value = gguf_field(self.reader, key, default)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, kind) and not isinstance(v, bool) for v in value):
            raise self.error(key, f"is {str(value)[:40]!r}; expected a list of {said}")
        return value

    def text(self, key: str) -> str | None:
        value = gguf_field(self.reader, key)
        if value is not None and not isinstance(value, str):
            raise self.error(key, f"is {str(value)[:40]!r}; expected a string")
        return value

    def token_id(self, key: str) -> int | None:
        value = gguf_field(self.reader, key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or not 0 <= value < len(self.tokens)):
            raise self.error(key, f"is {str(value)[:40]!r}; expected a token id below {len(self.tokens)}")
        return value

    def template(self) -> str | None:
        template = self.text("tokenizer.chat_template")
        if template is not None:
            try:
                _compile(template)
            except jinja2.TemplateError as exc:
                raise self.error("tokenizer.chat_template", f"is not a template jinja2 compiles ({exc})") from None
        return template


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _token_id(backend: Backend, token: str | dict | None) -> int | None:
    if isinstance(token, dict):
        token = token.get("content")
    return None if token is None else backend.token_to_id(token)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


@lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


class IncrementalDetokenizer:
    """Streams text as token ids arrive; holds back bytes until they complete a UTF-8 character.

    Decodes a short window (the previous emission plus the new tokens) and emits only the part that
    extends the previous emission's text and does not end in U+FFFD. `flush()` returns what is left at
    the end. The concatenation of all deltas equals `tokenizer.decode(all ids)`.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self.token_ids: list[int] = []
        self._prefix_offset = 0  # start of the window already emitted as context
        self._read_offset = 0  # tokens before this are emitted

    def _decode(self, start: int, end: int | None = None) -> str:
        return self._tokenizer.decode(self.token_ids[start:end], skip_special_tokens=self._skip_special)

    def push(self, token_id: int) -> str:
        """Add one token; return the newly completed text ('' while a character is incomplete)."""
        self.token_ids.append(token_id)
        prefix_text = self._decode(self._prefix_offset, self._read_offset)
        full_text = self._decode(self._prefix_offset)
        if len(full_text) <= len(prefix_text) or full_text.endswith("\ufffd"):
            return ""
        self._prefix_offset, self._read_offset = self._read_offset, len(self.token_ids)
        return full_text[len(prefix_text) :]

    def flush(self) -> str:
        """Whatever is still held back (it may end in U+FFFD if the stream ended mid-character)."""
        prefix_text = self._decode(self._prefix_offset, self._read_offset)
        full_text = self._decode(self._prefix_offset)
        self._prefix_offset = self._read_offset = len(self.token_ids)
        return full_text[len(prefix_text) :]


def byte_tokenizer(vocab_size: int) -> Tokenizer | None:
    """A stand-in tokenizer for models without one (dummy weights): ids 0-255 are bytes, then
    <|endoftext|> (EOS), <|im_start|>, <|im_end|> (end of turn) and a ChatML template; every later id
    decodes to a visible word (" t<id>"), so random weights still stream text a client can time. None if
    the vocabulary is smaller than 259."""
    specials = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    if vocab_size < 256 + len(specials):
        return None
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    others = [b for b in range(256) if b not in printable]
    byte_to_char = {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(others)}
    words = {f"\u0120t{i}": i for i in range(256 + len(specials), vocab_size)}  # \u0120 is a space, byte-level
    vocab = {byte_to_char[b]: b for b in range(256)} | {t: 256 + i for i, t in enumerate(specials)} | words
    backend = Backend(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    return Tokenizer(backend, None, 256, template, add_bos_token=False, stop_token_ids=(256, 258))
