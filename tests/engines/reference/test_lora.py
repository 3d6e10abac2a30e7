"""LoRA adapters: a row's logits equal those of the same model with its adapter merged into the weights.

For every weights format the engine keeps (float32 and bfloat16 dense, int8, int4), one flat batch mixes
rows of two adapters and rows of none, prefill and decode; each row must give what the merged model gives it
alone. The merged model holds, for each projection, the values the engine's kept weight multiplies by (its
dequantized values for int8 and int4) plus B A. Tolerances, stated per format:

- float32: 1e-4 absolute (float32 rounding of different kernels, as the batch-invariance test);
- bfloat16: both are rounded, so each is set against the exact answer (the same weights merged in float32):
  the unmerged row may be at most 1.5x as far from it as the merged bfloat16 model (measured: 0.4x-0.7x);
- int8 and int4 at a few rows, where the weight-only kernel runs: it rounds activations to bfloat16, so 2.5 %
  of the largest logit (measured: up to 1.4 %; the base model's own rows there: up to 1.1 %).

Each adapter changes its rows' logits by more than ten times the tolerance, so no check passes vacuously.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from engines.reference.core.dense import dense_values
from engines.reference.core.lora import MASKED_MAX_ROWS, LoraAdapter, LoraBatch, merged_weight
from engines.reference.core.model import PROJECTIONS, LlamaModel, ModelConfig
from engines.reference.core.model_runner import BatchItem, ModelRunner
from engines.reference.core.quant import QuantizedWeight
from engines.reference.loading.lora import AdapterError, load_adapter, write_random_adapter
from engines.reference.loading.weights import DUMMY_PRESETS, dummy_model

BLOCK_SIZE = 4
CONFIG = DUMMY_PRESETS["tiny"]


def _tokens(seed: int, length: int) -> list[int]:
    return torch.randint(0, 512, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(scope="module")
def adapter_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {
        "qv": write_random_adapter(root / "qv", CONFIG, rank=8, targets=("q_proj", "v_proj"), seed=1, std=0.3),
        "all": write_random_adapter(root / "all", CONFIG, rank=4, seed=2, std=0.3,
                                    targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj")),
    }  # fmt: skip


def _base(weights: str, dtype: torch.dtype) -> LlamaModel:
    model = dummy_model("tiny", dtype=dtype, seed=3, std=0.3)
    model.keep_weights(weights, weights)
    return model


def _values(weight: object) -> torch.Tensor:
    """What a kept weight multiplies by: its dequantized values, or the dense ones."""
    if isinstance(weight, QuantizedWeight):
        return weight.dequantized()
    return dense_values(weight).float()  # type: ignore[arg-type]


def _merged(base: LlamaModel, adapter: LoraAdapter | None, dtype: torch.dtype) -> LlamaModel:
    """A dense model holding the base's kept values plus the adapter's B A (no adapter: the base's values)."""
    merged = dummy_model("tiny", dtype=dtype, seed=3, std=0.3)  # norms and embeddings as the base's
    with torch.no_grad():
        for index, (layer, source) in enumerate(zip(merged.layers, base.layers, strict=True)):
            for name in PROJECTIONS:
                values = _values(getattr(source, name)).to(dtype)
                delta = adapter.layers[index].get(name) if adapter is not None else None
                getattr(layer, name).copy_(merged_weight(values, delta) if delta is not None else values)
        if base.head is not None:  # the LM head as kept (int8, int4): its values
            merged.lm_head.copy_(_values(base.head).to(dtype))
    return merged


def _runner(model: LlamaModel) -> ModelRunner:
    return ModelRunner(model, model.allocate_kv_cache(64, BLOCK_SIZE), BLOCK_SIZE)


def _solo(model: LlamaModel, item: BatchItem) -> torch.Tensor:
    runner = _runner(model)
    if item.num_computed_tokens:
        runner.run([BatchItem(item.token_ids, 0, item.num_computed_tokens, item.block_table)])
    return runner.run([BatchItem(item.token_ids, item.num_computed_tokens, item.num_new_tokens, item.block_table)])[0]


def _check_rows(base: LlamaModel, items: list[BatchItem], dtype: torch.dtype, tolerance: float, relative: bool) -> None:
    """Each row of the batch against its merged model alone: within `tolerance` (of the largest logit where
    `relative`); in bfloat16 within `tolerance` times the merged bfloat16 model's own distance from exact."""
    runner = _runner(base)
    runner.run([BatchItem(i.token_ids, 0, i.num_computed_tokens, i.block_table, i.adapter)
                for i in items if i.num_computed_tokens])  # fmt: skip
    batched = runner.run(items).float()
    merged = {None: _merged(base, None, dtype)}
    for item in items:
        if item.adapter is not None and item.adapter.name not in merged:
            merged[item.adapter.name] = _merged(base, item.adapter, dtype)
    for row, item in enumerate(items):
        expected = _solo(merged[item.adapter.name if item.adapter else None], item).float()
        without = _solo(merged[None], item).float()
        limit = tolerance * expected.abs().max().item() if relative else tolerance
        if dtype == torch.bfloat16:
            exact = _solo(_merged(base, item.adapter, torch.float32), item).float()
            limit = tolerance * (expected - exact).abs().max().item()
            expected = exact
        error = (batched[row] - expected).abs().max().item()
        assert error <= limit, f"row {row} ({item.adapter.name if item.adapter else 'base'}): {error:.3g} > {limit:.3g}"
        if item.adapter is not None:  # the adapter really changes the logits: the check is not vacuous
            assert (expected - without).abs().max().item() > 10 * limit


FORMATS = {  # id -> (weights kept, dtype, tolerance, relative)
    "fp32": ("bf16", torch.float32, 1e-4, False),  # "bf16" is the dense format: in the model's dtype
    "bf16": ("bf16", torch.bfloat16, 1.5, False),
    "int8": ("int8", torch.float32, 1e-4, False),
    "int4": ("int4", torch.float32, 1e-4, False),
}


@pytest.mark.parametrize("format_id", list(FORMATS))
def test_a_mixed_batch_gives_each_row_its_merged_models_logits(format_id: str, adapter_dirs: dict[str, Path]) -> None:
    """Prefills and decodes of two adapters and of the base model in one batch (many rows: dense products)."""
    weights, dtype, tolerance, relative = FORMATS[format_id]
    base = _base(weights, dtype)
    qv, every = (load_adapter(n, adapter_dirs[n], CONFIG) for n in ("qv", "all"))
    tables = [list(range(i * 8, i * 8 + 8)) for i in range(6)]
    items = [
        BatchItem(_tokens(1, 13), 0, 13, tables[0], qv),  # a whole prompt
        BatchItem(_tokens(2, 20), 19, 1, tables[1], every),  # a decode
        BatchItem(_tokens(3, 11), 0, 11, tables[2]),  # the base model's prompt
        BatchItem(_tokens(4, 17), 16, 1, tables[3], qv),  # a decode of the first adapter
        BatchItem(_tokens(5, 19), 8, 11, tables[4], every),  # a second chunk over a cached prefix
        BatchItem(_tokens(6, 9), 8, 1, tables[5]),  # the base model's decode
    ]
    _check_rows(base, items, dtype, tolerance, relative)


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_decodes_through_the_weight_only_kernel_match_the_merged_model(
    weights: str, adapter_dirs: dict[str, Path]
) -> None:
    """Three decode rows (the quantized kernel's range), two adapters and none: 2.5 % of the largest logit."""
    base = _base(weights, torch.float32)
    qv, every = (load_adapter(n, adapter_dirs[n], CONFIG) for n in ("qv", "all"))
    items = [BatchItem(_tokens(7, 12), 11, 1, list(range(0, 8)), qv),
             BatchItem(_tokens(8, 15), 14, 1, list(range(8, 16)), every),
             BatchItem(_tokens(9, 10), 9, 1, list(range(16, 24)))]  # fmt: skip
    _check_rows(base, items, torch.float32, 0.025, True)


def test_an_adapter_in_another_shape_or_layout_is_refused(tmp_path: Path, adapter_dirs: dict[str, Path]) -> None:
    """A rank over --max-lora-rank, a model of another width, a bias or DoRA, a missing file: each named."""
    with pytest.raises(AdapterError, match="over --max-lora-rank 4"):
        load_adapter("qv", adapter_dirs["qv"], CONFIG, max_rank=4)
    with pytest.raises(AdapterError, match=r"shape \(8, 64\), expected \(8, 576\)"):
        load_adapter("qv", adapter_dirs["qv"], DUMMY_PRESETS["smollm2-135m"])
    for field, value, said in (("bias", "all", "bias is 'all'"), ("use_dora", True, "use_dora is True"),
                               ("target_modules", ["lm_head"], "target_modules"), ("r", 0, "r is 0"),
                               ("modules_to_save", ["lm_head"], "modules_to_save")):  # fmt: skip
        directory = write_random_adapter(tmp_path / field, CONFIG, rank=4)
        config_file = directory / "adapter_config.json"
        config_file.write_text(json.dumps({**json.loads(config_file.read_text()), field: value}))
        with pytest.raises(AdapterError, match=rf"adapter_config.json: {said}"):
            load_adapter(field, directory, CONFIG)
    with pytest.raises(AdapterError, match="no adapter_config.json"):
        load_adapter("empty", tmp_path, CONFIG)
    directory = write_random_adapter(tmp_path / "broken", CONFIG, rank=4)
    (directory / "adapter_model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(AdapterError, match="can't be read as safetensors"):
        load_adapter("broken", directory, CONFIG)


def _projection_shapes(config: ModelConfig) -> dict[str, tuple[int, int]]:
    """Each fused projection's (in, out) features."""
    qkv_rows = config.q_size + 2 * config.kv_size
    return {"qkv_proj": (config.hidden_size, qkv_rows), "o_proj": (config.q_size, config.hidden_size),
            "gate_up_proj": (config.hidden_size, 2 * config.intermediate_size),
            "down_proj": (config.intermediate_size, config.hidden_size)}  # fmt: skip


@pytest.mark.parametrize("num_decodes", [6, 60], ids=["few-rows", "many-rows"])
def test_rows_of_several_adapters_batched_get_each_its_own_adapters_projection(
    num_decodes: int, adapter_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """Three adapters (ranks 8, 4, 2; q/v, all seven targets, k/o/down) and base rows, a prompt among decodes:
    every projection of every layer adds to each row what its own adapter alone adds (nothing for base rows),
    in the masked form (few rows) and the sorted one (more than MASKED_MAX_ROWS rows)."""
    qv, every = (load_adapter(n, adapter_dirs[n], CONFIG) for n in ("qv", "all"))
    odd = load_adapter("odd", write_random_adapter(tmp_path / "odd", CONFIG, rank=2, seed=5, std=0.3,
                                                   targets=("k_proj", "o_proj", "down_proj")), CONFIG)  # fmt: skip
    cycle = [qv, None, every, odd, every, qv]
    spans = [(cycle[i % len(cycle)], 1) for i in range(num_decodes)]
    spans[2:2] = [(every, 13)]  # a prompt of 13 rows among the decodes
    spans.append((None, 3))  # a base prompt last
    batch = LoraBatch.from_spans(spans, "cpu")
    assert batch is not None
    assert (batch.sorted_rows is None) == (batch.num_rows <= MASKED_MAX_ROWS)
    row_adapters = [adapter for adapter, count in spans for _ in range(count)]
    generator = torch.Generator().manual_seed(11)
    for layer in range(CONFIG.num_layers):
        for projection, (in_features, out_features) in _projection_shapes(CONFIG).items():
            x = torch.randn(batch.num_rows, in_features, generator=generator)
            base = torch.randn(batch.num_rows, out_features, generator=generator)
            got = batch.add_deltas(base.clone(), x, layer, projection)
            expected = base.clone()
            for row, adapter in enumerate(row_adapters):
                delta = adapter.layers[layer].get(projection) if adapter is not None else None
                if delta is not None:
                    expected[row] += delta.product(x[row : row + 1])[0]
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=f"layer {layer} {projection}")


def test_a_runner_builds_one_stack_per_set_of_adapters_and_reuses_it(adapter_dirs: dict[str, Path]) -> None:
    """Every layer of every step of the same adapters reads one stack, built once; a step of a subset reuses it
    (unless the stack is over twice as wide as the subset needs); an adapter served anew under a known name is
    stacked anew (never another adapter's weights)."""
    qv, every = (load_adapter(n, adapter_dirs[n], CONFIG) for n in ("qv", "all"))
    runner = _runner(_base("bf16", torch.float32))
    tables = [list(range(i * 8, i * 8 + 8)) for i in range(3)]
    steps = [[BatchItem(_tokens(1, 9), 0, 9, tables[0], qv), BatchItem(_tokens(2, 5), 0, 5, tables[1], every)],
             [BatchItem(_tokens(1, 10), 9, 1, tables[0], qv), BatchItem(_tokens(2, 6), 5, 1, tables[1], every),
              BatchItem(_tokens(3, 4), 0, 4, tables[2])],
             [BatchItem(_tokens(2, 7), 6, 1, tables[1], every)]]  # fmt: skip
    for step in steps:
        runner.run(step)
    assert runner.lora_stacks.num_builds == 1
    (stack,) = runner.lora_stacks.stacks.values()
    assert stack.names == ("all", "qv")
    alone = LoraBatch.from_spans([(qv, 1)], "cpu", runner.lora_stacks)  # under half the stack's width: its own
    assert alone is not None and alone.stacked.names == ("qv",) and runner.lora_stacks.num_builds == 2
    again = load_adapter("qv", adapter_dirs["qv"], CONFIG)  # the same name, another adapter
    batch = LoraBatch.from_spans([(again, 1)], "cpu", runner.lora_stacks)
    assert batch is not None and batch.stacked.adapters[0] is again and runner.lora_stacks.num_builds == 3
