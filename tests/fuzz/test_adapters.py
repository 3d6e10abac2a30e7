"""Fuzz of the PEFT LoRA reader (`engines/reference/loading/lora.py read_adapter_config`, `load_adapter`) over an
adapter `write_random_adapter` makes for the tiny preset, as `bench lora make` does: its adapter_config.json and
its adapter_model.safetensors (the JSON header, and the bytes) mutated."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engines.reference.loading.lora import CONFIG_FILE, WEIGHTS_FILE, AdapterError, load_adapter, write_random_adapter
from engines.reference.loading.weights import DUMMY_PRESETS
from tests.fuzz.mutations import byte_mutations, fuzz, mutations, outcome, to_json, write

CONFIG = DUMMY_PRESETS["tiny"]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An adapter of rank 4 on q, k, v and down projections of the tiny preset's 2 layers."""
    return write_random_adapter(tmp_path_factory.mktemp("adapter") / "made", CONFIG, rank=4,
                                targets=("q_proj", "k_proj", "v_proj", "down_proj"))


def _adapter(fuzz_dir: Path, made: Path, test: str, config: bytes | None = None,
             weights: bytes | None = None) -> Path:
    """A copy of the made adapter with its config or weights file replaced."""
    folder = write(fuzz_dir, "adapter", b"", test)
    folder.unlink()
    shutil.copytree(made, folder)
    if config is not None:
        (folder / CONFIG_FILE).write_bytes(config)
    if weights is not None:
        (folder / WEIGHTS_FILE).write_bytes(weights)
    return folder


def _header(weights: bytes) -> tuple[dict[str, object], bytes]:
    size = struct.unpack("<Q", weights[:8])[0]
    return json.loads(weights[8:8 + size]), weights[8 + size:]


def _load(test: str, folder: Path, named: Path, mutation: object = None) -> None:
    """Loaded as the engine loads it (the tiny preset's shape), or refused naming the adapter's file."""
    outcome(test, lambda: load_adapter("fuzzed", folder, CONFIG), AdapterError, named, mutation)  # type: ignore[arg-type]


@fuzz(300)
@given(st.data())
def test_adapter_config_mutated_is_read_or_refused_naming_file_and_field(fuzz_dir: Path, made: Path,
                                                                         data: st.DataObject) -> None:
    """adapter_config.json with one value, key or list changed (r, lora_alpha, target_modules, bias, use_dora,
    modules_to_save, ...) is read and loaded, or refused with an AdapterError naming the file and the field."""
    mutation = data.draw(mutations(json.loads((made / CONFIG_FILE).read_text())))
    test = "adapters: adapter_config.json, structure"
    folder = _adapter(fuzz_dir, made, test, config=to_json(mutation.document, indent=2).encode())
    _load(test, folder, folder, mutation)  # a config that disowns the weights' tensors: the weights file named


@fuzz(300)
@given(st.data())
def test_safetensors_header_mutated_is_loaded_or_refused_naming_the_file(fuzz_dir: Path, made: Path,
                                                                          data: st.DataObject) -> None:
    """The weights' JSON header with one value changed (a tensor's dtype, shape, data_offsets, name; the metadata):
    loaded, or refused with an AdapterError naming the weights file."""
    header, body = _header((made / WEIGHTS_FILE).read_bytes())
    mutation = data.draw(mutations(header))
    text = to_json(mutation.document).encode()
    test = "adapters: safetensors header, structure"
    folder = _adapter(fuzz_dir, made, test, weights=struct.pack("<Q", len(text)) + text + body)
    _load(test, folder, folder / WEIGHTS_FILE)


@fuzz(300)
@given(st.sampled_from([CONFIG_FILE, WEIGHTS_FILE]), st.data())
def test_adapter_bytes_mutated_are_loaded_or_refused_naming_the_file(fuzz_dir: Path, made: Path, name: str,
                                                                     data: st.DataObject) -> None:
    """Either file cut, flipped, with garbage inserted (the header's length too): loaded, or refused naming it."""
    raw = (made / name).read_bytes()
    # the weights: the header and the first tensor's bytes, where a change alters what is read
    cut = len(raw) if name == CONFIG_FILE else 8 + struct.unpack("<Q", raw[:8])[0] + 64
    mutated = data.draw(byte_mutations(raw[:cut])) + raw[cut:]
    test = "adapters: bytes"
    folder = _adapter(fuzz_dir, made, test, **{"config" if name == CONFIG_FILE else "weights": mutated})
    _load(test, folder, folder)  # a config changed may disown the weights' tensors: then the weights file is named
