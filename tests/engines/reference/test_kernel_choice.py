"""The weight-only kernel or the dense copy, chosen by timing both at load: one verdict per shape, applied to
every weight of that shape, the kernel kept only up to the rows where it won at every count, and the two paths
giving the same logits (they read the same values)."""

from __future__ import annotations

import pytest
import torch

from engines.reference.core.kernel_choice import ROW_COUNTS, _max_winning_rows, choose_kernels
from engines.reference.core.model import PROJECTIONS
from engines.reference.core.quant import QuantizedWeight
from engines.reference.loading.weights import dummy_model, resolve_model


def test_the_kernel_keeps_the_rows_up_to_its_first_loss() -> None:
    assert ROW_COUNTS == (1, 2, 4, 8, 16)
    assert _max_winning_rows((1, 1, 1, 2, 9), (3, 3, 3, 3, 3)) == 8
    assert _max_winning_rows((1, 5, 1, 1, 1), (3, 3, 3, 3, 3)) == 1  # a loss at 2 rows ends it, later wins or not
    assert _max_winning_rows((4, 1, 1, 1, 1), (3, 3, 3, 3, 3)) == 0  # slower at one row: the dense copy always
    assert _max_winning_rows((1, 1, 1, 1, 1), (3, 3, 3, 3, 3)) == 16


def _quantized(model: torch.nn.Module) -> list[QuantizedWeight]:
    return [m for m in model.modules() if isinstance(m, QuantizedWeight)]


@pytest.mark.parametrize("weight_format", ["int8", "int4"])
def test_one_verdict_per_shape_is_set_on_every_weight_of_that_shape(weight_format: str) -> None:
    model = dummy_model("tiny", dtype=torch.bfloat16)
    model.keep_weights(weight_format, weight_format)
    choices = choose_kernels(_quantized(model), model.dtype, repeats=3)
    shapes = {tuple(w.shape) for w in _quantized(model)}
    assert sorted(c.shape for c in choices) == sorted(shapes)
    assert sum(c.num_weights for c in choices) == len(_quantized(model)) == len(model.layers) * len(PROJECTIONS) + 1
    for choice in choices:
        assert choice.max_rows in (0, *ROW_COUNTS) and len(choice.kernel_ms) == len(ROW_COUNTS)
        assert all(w.max_rows == choice.max_rows for w in _quantized(model) if tuple(w.shape) == choice.shape)
        assert f"{choice.shape[0]}x{choice.shape[1]} {weight_format}" in choice.line()


def test_a_loaded_model_says_what_it_chose_and_both_paths_give_the_same_logits() -> None:
    loaded = resolve_model("dummy:tiny", dtype=torch.float32, weights="int4")
    assert loaded.kernels and {c.format for c in loaded.kernels} <= {"int4", "int8"}
    weight = next(w for w in _quantized(loaded.model) if w.format == "int4")
    x = torch.randn(3, weight.shape[1])
    for max_rows in (0, 16):  # the dense copy, then the kernel: the same values, the kernel's bfloat16 rounding
        weight.max_rows = max_rows
        torch.testing.assert_close(weight.linear(x), weight.kernel_linear(x), rtol=2e-2, atol=2e-2)


def test_the_timing_goes_round_every_weight_of_a_shape_so_none_is_timed_from_the_caches() -> None:
    model = dummy_model("tiny", dtype=torch.bfloat16)
    model.keep_weights("int4", "int8")
    members = [layer.qkv_proj for layer in model.layers]
    calls: dict[int, int] = {}

    def counted(index: int, product):  # noqa: ANN001, ANN202 - the weight's own product, counted
        def call(x: torch.Tensor) -> torch.Tensor:
            calls[index] = calls.get(index, 0) + 1
            return product(x)
        return call

    for index, weight in enumerate(members):
        weight.kernel_linear = counted(index, weight.kernel_linear)
    (choice,) = choose_kernels(members, torch.bfloat16, repeats=len(members))
    # every weight once at each row count (and the first once more, to warm the code paths): none read twice in a row
    assert calls == {0: 2 * len(ROW_COUNTS), **{i: len(ROW_COUNTS) for i in range(1, len(members))}}
    assert choice.num_weights == len(members) and all(w.max_rows == choice.max_rows for w in members)
