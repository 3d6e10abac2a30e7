"""Fuzz of the GGUF reader (`engines/reference/loading/gguf_file.py` and the tokenizer it holds, through
`weights.resolve_model` as `--model FILE.gguf` loads it) over a small llama GGUF written with gguf's GGUFWriter: the
tiny preset's shape, a byte-level BPE vocabulary with merges and special tokens, a chat template, tensors in F32,
F16 and Q8_0. Its metadata is mutated (a value of another GGUF type, a key dropped or renamed), and the bytes of its
header, metadata and tensor table. The real SmolLM2 file's header is read too, unmutated (90 MB: not byte-fuzzed)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import pre_tokenizers

from engines.reference.loading.weights import resolve_model, resolve_model_config
from tests.fuzz.mutations import CASES, ODD_TEXT, byte_mutations, fuzz, outcome, write

# Expected of mutated files: an unknown pre-tokenizer name is warned of and GPT-2's used; NaN weights dequantize.
pytestmark = pytest.mark.filterwarnings("ignore:GGUF tokenizer.ggml.pre", "ignore::RuntimeWarning")
T = gguf.GGUFValueType
Q = gguf.GGMLQuantizationType
HIDDEN, INTER, LAYERS, HEADS, KV_HEADS = 64, 128, 2, 4, 2
ALPHABET = sorted(pre_tokenizers.ByteLevel.alphabet())
MERGES = ["h e", "l l", "he ll", "o Ġ", "Ġ w", "hell o"]
SPECIALS = ["<|im_start|>", "<|im_end|>"]
TOKENS = [*SPECIALS, *ALPHABET, *(m.replace(" ", "") for m in MERGES)]
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)  # what GGUF's UTF-8 strings can hold
Value = tuple[Any, gguf.GGUFValueType, gguf.GGUFValueType | None]  # value, its type, an array's item type
METADATA: dict[str, Value] = {
    "llama.block_count": (LAYERS, T.UINT32, None), "llama.context_length": (256, T.UINT32, None),
    "llama.embedding_length": (HIDDEN, T.UINT32, None), "llama.feed_forward_length": (INTER, T.UINT32, None),
    "llama.attention.head_count": (HEADS, T.UINT32, None), "llama.attention.head_count_kv": (KV_HEADS, T.UINT32, None),
    "llama.attention.key_length": (HIDDEN // HEADS, T.UINT32, None), "llama.rope.freq_base": (10000.0, T.FLOAT32, None),
    "llama.attention.layer_norm_rms_epsilon": (1e-5, T.FLOAT32, None),
    "tokenizer.ggml.model": ("gpt2", T.STRING, None), "tokenizer.ggml.pre": ("smollm", T.STRING, None),
    "tokenizer.ggml.tokens": (TOKENS, T.ARRAY, T.STRING),
    "tokenizer.ggml.token_type": ([3, 3] + [1] * (len(TOKENS) - 2), T.ARRAY, T.INT32),
    "tokenizer.ggml.merges": (MERGES, T.ARRAY, T.STRING),
    "tokenizer.ggml.bos_token_id": (0, T.UINT32, None), "tokenizer.ggml.eos_token_id": (1, T.UINT32, None),
    "tokenizer.ggml.add_bos_token": (False, T.BOOL, None), "tokenizer.chat_template": (TEMPLATE, T.STRING, None),
}
SHAPES = {"token_embd": (len(TOKENS), HIDDEN), "output_norm": (HIDDEN,), "attn_norm": (HIDDEN,),
          "ffn_norm": (HIDDEN,), "attn_q": (HIDDEN, HIDDEN), "attn_k": (HIDDEN // 2, HIDDEN),
          "attn_v": (HIDDEN // 2, HIDDEN), "attn_output": (HIDDEN, HIDDEN), "ffn_gate": (INTER, HIDDEN),
          "ffn_up": (INTER, HIDDEN), "ffn_down": (HIDDEN, INTER)}
TYPES = {"token_embd": Q.Q8_0, "attn_q": Q.F16, "ffn_down": Q.Q8_0}  # the others F32
TENSORS = ["token_embd", "output_norm", *(f"blk.{i}.{kind}" for i in range(LAYERS) for kind in SHAPES
                                          if kind not in ("token_embd", "output_norm"))]


def write_gguf(path: Path, metadata: dict[str, Value]) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, (value, vtype, sub_type) in metadata.items():
        writer.add_key_value(key, value, vtype, sub_type=sub_type)
    rng = np.random.default_rng(0)
    for name in TENSORS:
        kind = name.split(".")[-1]
        values = rng.standard_normal(SHAPES[kind]).astype(np.float32) * 0.02
        qtype = TYPES.get(kind, Q.F32)
        data = gguf.quants.quantize(values, qtype)
        writer.add_tensor(f"{name}.weight", data, raw_dtype=qtype if qtype not in (Q.F32, Q.F16) else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def gguf_values() -> st.SearchStrategy[Value]:
    """A metadata value of any GGUF type, the odd ones weighted in."""
    def ints(vtype: gguf.GGUFValueType, low: int, high: int) -> st.SearchStrategy[Value]:
        edges = st.sampled_from([low, high, 0, 1, -1 if low < 0 else 2, 7])
        return st.one_of(edges, st.integers(low, high)).map(lambda v: (v, vtype, None))

    texts = st.one_of(TEXT, st.sampled_from([t for t in ODD_TEXT if len(t) < 2000 and "\ud800" not in t]))
    return st.one_of(
        ints(T.UINT32, 0, 2**32 - 1), ints(T.INT32, -(2**31), 2**31 - 1), ints(T.UINT64, 0, 2**64 - 1),
        ints(T.INT64, -(2**63), 2**63 - 1), ints(T.UINT8, 0, 255),
        st.floats(width=32).map(lambda v: (v, T.FLOAT32, None)), st.floats().map(lambda v: (v, T.FLOAT64, None)),
        st.booleans().map(lambda v: (v, T.BOOL, None)), texts.map(lambda v: (v, T.STRING, None)),
        st.lists(texts, min_size=1, max_size=5).map(lambda v: (v, T.ARRAY, T.STRING)),
        st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=5).map(lambda v: (v, T.ARRAY, T.INT32)),
        st.lists(st.floats(width=32), min_size=1, max_size=3).map(lambda v: (v, T.ARRAY, T.FLOAT32)),
    )


@st.composite
def metadata_mutations(draw: st.DrawFn) -> tuple[dict[str, Value], str, str]:
    """The metadata with one key's value replaced by one of another type, dropped, renamed, or an array's item
    changed; returns it with the key and what was done."""
    metadata = dict(METADATA)
    key = draw(st.sampled_from(list(metadata)))
    action = draw(st.sampled_from(["replace", "replace", "item", "drop", "rename"]))
    if action == "drop":
        del metadata[key]
    elif action == "rename":
        metadata[draw(st.sampled_from(["general.architecture", "llama.vocab_size", key.upper(), key + "x"]))] = \
            metadata.pop(key)
    elif action == "item" and metadata[key][1] == T.ARRAY:
        values, vtype, sub = metadata[key]
        index = draw(st.integers(0, len(values) - 1))
        item = draw(TEXT if sub == T.STRING else st.integers(-(2**31), 2**31 - 1))
        metadata[key] = ([*values[:index], item, *values[index + 1:]], vtype, sub)
    else:
        action = "replace"
        metadata[key] = draw(gguf_values())
    return metadata, key, action


def _load(test: str, path: Path, key: str | None = None) -> None:
    """Loaded as `--model FILE.gguf` loads it (shape, weights, tokenizer, its chat template compiled), or refused
    with a ValueError naming the file, and the metadata key where one was changed."""
    def load() -> None:
        loaded = resolve_model(str(path))
        assert loaded.tokenizer is not None
        loaded.tokenizer.encode("hello world")

    outcome(test, lambda: resolve_model_config(str(path)), ValueError, path)
    outcome(test, load, ValueError, path)


@fuzz(200)
@given(metadata_mutations())
def test_gguf_metadata_mutated_is_loaded_or_refused_naming_file_and_key(fuzz_dir: Path,
                                                                         mutated: tuple[dict[str, Value], str, str]
                                                                         ) -> None:
    """A GGUF whose metadata has one key of another type (a string for a count, an array for a number, NaN, a
    negative or 2^64-1 count), dropped, renamed, or one token or merge changed: loaded, or refused with a
    ValueError naming the file."""
    metadata, key, action = mutated
    test = "gguf: metadata, structure"
    path = write(fuzz_dir, "tiny.gguf", b"", test)
    write_gguf(path, metadata)
    _load(test, path, key)


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, int]:
    """The sample's bytes and where its tensor data begins (what comes before is the header, metadata and the
    tensor table)."""
    path = write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", METADATA)
    return path.read_bytes(), gguf.GGUFReader(str(path)).data_offset


@fuzz(400)
@given(st.data())
def test_gguf_header_bytes_mutated_are_loaded_or_refused_naming_the_file(fuzz_dir: Path, sample: tuple[bytes, int],
                                                                          data: st.DataObject) -> None:
    """The header, metadata and tensor table cut, flipped, with garbage inserted (a length, a count, a type id, a
    tensor's dims or offset): loaded, or refused with a ValueError naming the file."""
    raw, data_offset = sample
    head = data.draw(byte_mutations(raw[:data_offset]))
    test = "gguf: bytes"
    path = write(fuzz_dir, "tiny.gguf", head + raw[data_offset:], test)
    _load(test, path)


def test_the_sample_and_smollm2_header_read(tmp_path: Path) -> None:
    """The unmutated sample loads and chats; the real SmolLM2 GGUF's shape is read from its header."""
    from engines.convert import default_gguf

    path = write_gguf(tmp_path / "tiny.gguf", METADATA)
    _load("gguf: sample", path)
    assert CASES[("gguf: sample", "read")] == 2 and not CASES[("gguf: sample", "refused")]
    config = resolve_model_config(str(default_gguf()))
    assert (config.num_layers, config.hidden_size, config.vocab_size) == (30, 576, 49152)


def test_every_count_key_odd_values_are_refused_naming_file_and_key(tmp_path: Path) -> None:
    """Each count the shape is read from, set to each odd value (0, a string, -1 as INT32, 2^64-1, a per-layer list
    that varies, NaN):
    refused with a ValueError naming the file and that key."""
    counts = [k for k in METADATA if k.startswith("llama.") and METADATA[k][1] == T.UINT32]
    odd: list[Value] = [(0, T.UINT32, None), ("8", T.STRING, None), (-1, T.INT32, None), (2**64 - 1, T.UINT64, None),
                        ([4, 8], T.ARRAY, T.INT32), (float("nan"), T.FLOAT32, None)]
    for index, (key, value) in enumerate(itertools.product(counts, odd)):
        path = write_gguf(tmp_path / f"{index:03d}.gguf", {**METADATA, key: value})
        with pytest.raises(ValueError) as caught:
            resolve_model_config(str(path))
        assert str(path) in str(caught.value) and key.removeprefix("llama.") in str(caught.value), (key, value)
