"""Our LoRA path against an independent one: Hugging Face PEFT on transformers' LlamaForCausalLM.

An adapter that PEFT itself trained-shaped and saved (r=4 on q, v and down, rsLoRA off; its B drawn nonzero)
loads in the reference engine and gives PEFT's logits; an adapter `bench lora make` writes loads in PEFT and
gives ours. Same base weights (a tiny GQA Llama saved as safetensors) on both sides.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engines.reference.core.model import LlamaModel
from engines.reference.core.model_runner import BatchItem, ModelRunner
from engines.reference.loading.lora import load_adapter, write_random_adapter
from engines.reference.loading.weights import load_safetensors_dir

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

TOKENS = torch.randint(0, 256, (15,), generator=torch.Generator().manual_seed(4)).tolist()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                      rope_theta=500.0, tie_word_embeddings=False)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.3) if param.dim() > 1 else param.uniform_(0.5, 1.5)
    directory = tmp_path_factory.mktemp("base")
    model.save_pretrained(directory)
    return model, directory


def _ours(model: LlamaModel, adapter: object) -> torch.Tensor:
    runner = ModelRunner(model, model.allocate_kv_cache(16, 4), 4)
    return runner.run([BatchItem(TOKENS, 0, len(TOKENS), list(range(4)), adapter)])[0]  # type: ignore[arg-type]


def _peft_logits(peft_model: object) -> torch.Tensor:
    with torch.no_grad():
        return peft_model(torch.tensor([TOKENS])).logits[0, -1].float()  # type: ignore[operator]


def test_an_adapter_peft_saved_gives_peft_logits_here(base: tuple[object, Path], tmp_path: Path) -> None:
    hf_model, directory = base
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0)
    peft_model = peft.get_peft_model(hf_model, config).eval()
    with torch.no_grad():  # PEFT starts B at zero (a no-op adapter): draw it, so the adapter changes the output
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.3)
    peft_model.save_pretrained(tmp_path / "adapter")
    expected = _peft_logits(peft_model)
    ours = load_safetensors_dir(directory)
    without = _ours(ours, None)
    got = _ours(ours, load_adapter("peft", tmp_path / "adapter", ours.config))
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert (got - without).abs().max() > 0.1  # the adapter matters
    peft_model.unload()  # the base model as it was, for the next test


def test_an_adapter_bench_writes_loads_in_peft_with_our_logits(base: tuple[object, Path], tmp_path: Path) -> None:
    hf_model, directory = base
    ours = load_safetensors_dir(directory)
    adapter_dir = write_random_adapter(tmp_path / "made", ours.config, rank=8, seed=5, std=0.3,
                                       targets=("k_proj", "o_proj", "gate_proj", "up_proj"))  # fmt: skip
    peft_model = peft.PeftModel.from_pretrained(hf_model, adapter_dir).eval()
    got = _ours(ours, load_adapter("made", adapter_dir, ours.config))
    torch.testing.assert_close(got, _peft_logits(peft_model), atol=1e-4, rtol=1e-4)
    peft_model.unload()
