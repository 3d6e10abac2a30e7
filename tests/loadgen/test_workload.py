"""Length distributions and the synthetic request stream: seeded, within bounds, validated."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from loadgen.datasets import iter_requests
from loadgen.workload import LENGTH_SPEC_HELP, LengthDistribution, SharedPrefix, Workload, parse_length_spec


@pytest.mark.parametrize("spec", ["128", "uniform:10:50", "normal:100:30:20:180", "lognormal:200:150:16:1024"])
def test_lengths_are_seeded_and_within_bounds(spec: str) -> None:
    dist = parse_length_spec(spec)
    first = dist.sample(np.random.default_rng(3), 5000)
    again = dist.sample(np.random.default_rng(3), 5000)
    assert np.array_equal(first, again)
    assert first.min() >= dist.min
    if dist.max is not None:
        assert first.max() <= dist.max
    else:
        assert dist.dist == "fixed" and set(first) == {dist.value}


def test_fixed_length_is_exact() -> None:
    assert set(parse_length_spec("77").sample(np.random.default_rng(0), 100)) == {77}


def test_uniform_covers_its_whole_range() -> None:
    values = parse_length_spec("uniform:10:20").sample(np.random.default_rng(0), 5000)
    assert set(values) == set(range(10, 21))


@pytest.mark.parametrize("dist", ["normal", "lognormal"])
def test_mean_and_std_are_those_of_the_lengths(dist: str) -> None:
    values = parse_length_spec(f"{dist}:300:60").sample(np.random.default_rng(1), 50_000)
    assert values.mean() == pytest.approx(300, rel=0.02)
    assert values.std() == pytest.approx(60, rel=0.05)


@pytest.mark.parametrize("spec", ["0", "x", "uniform:5", "normal:10", "gauss:1:2", "uniform:50:10", "normal:-1:2"])
def test_bad_length_specs_name_the_accepted_forms(spec: str) -> None:
    with pytest.raises(ValueError, match=f"^bad length '{spec}'") as error:
        parse_length_spec(spec)
    assert str(error.value).endswith(f"accepted: {LENGTH_SPEC_HELP}")


def test_distribution_fields_are_validated_by_name() -> None:
    with pytest.raises(ValidationError, match="needs field"):
        LengthDistribution(dist="lognormal", mean=10)
    with pytest.raises(ValidationError, match="extra"):
        LengthDistribution.model_validate({"dist": "fixed", "value": 3, "valu": 4})


def test_request_stream_is_reproducible_and_never_repeats_a_prompt() -> None:
    workload = Workload(input_tokens=parse_length_spec("uniform:20:40"), output_tokens=parse_length_spec("64"))
    first = [spec for _, spec in zip(range(300), iter_requests(workload), strict=False)]
    again = [spec for _, spec in zip(range(300), iter_requests(workload), strict=False)]
    assert first == again
    assert len({spec.prompt for spec in first}) == 300
    assert all(20 <= len(spec.prompt.split()) <= 40 and spec.max_tokens == 64 for spec in first)
    other_seed = next(iter_requests(workload.model_copy(update={"seed": 1})))
    assert other_seed.prompt != first[0].prompt


def test_shared_prefix_groups_share_exactly_their_system_prompt() -> None:
    workload = Workload(shared_prefix=SharedPrefix(groups=3, tokens=50), input_tokens=parse_length_spec("10"))
    specs = [spec for _, spec in zip(range(9), iter_requests(workload), strict=False)]
    system_prompts = [spec.system_prompt for spec in specs]
    assert len(set(system_prompts)) == 3
    assert system_prompts[0] == system_prompts[3] == system_prompts[6]
    assert all(len(p.split()) == 50 for p in system_prompts if p)
    assert specs[0].messages()[0] == {"role": "system", "content": system_prompts[0]}
    assert specs[0].completion_prompt().startswith(system_prompts[0])


def test_prompts_are_cut_at_exact_token_counts_with_a_tokenizer(tmp_path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from loadgen.datasets import WORDS, TokenizerFile

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"], show_progress=False)
    tokenizer.train_from_iterator([" ".join(WORDS)] * 3, trainer=trainer)
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    workload = Workload(input_tokens=parse_length_spec("uniform:30:90"))
    for _, spec in zip(range(20), iter_requests(workload, TokenizerFile(path)), strict=False):
        assert len(tokenizer.encode(spec.prompt).ids) == spec.input_tokens_target
