"""Fuzz of the YAML inputs a user may be handed: scenarios (`bench/inputs/scenario.py load_scenario`, over the
shipped scenarios/*.yaml), price catalogs (`costmodel/prices.py load_catalog`, over rows of the shipped catalogs),
engine files (`engines/engine_file.py load_engine_file`, over the documented examples) and tune configurations
(`bench/flows/tune_plan.py read_configs`). Each is read, or refused with its own error naming the file and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from bench.flows.tune_plan import TuneError, read_configs
from bench.inputs.scenario import ScenarioError, load_scenario
from costmodel.prices import PriceError, load_catalog
from engines.engine_file import load_engine_file
from tests.fuzz.mutations import byte_mutations, fuzz, mutations, outcome, to_yaml, write

ROOT = Path(__file__).parents[2]
SCENARIOS = {path.name: yaml.safe_load(path.read_text()) for path in sorted((ROOT / "scenarios").glob("*.yaml"))}
PRICES = {name: yaml.safe_load((ROOT / "costmodel" / "prices" / name).read_text())
          for name in ("gpus.yaml", "providers.yaml", "finetunes.yaml")}
PRICE_FILE = {"gpus": PRICES["gpus.yaml"]["gpus"][:6], "providers": PRICES["providers.yaml"]["providers"][:6],
              "finetunes": PRICES["finetunes.yaml"]["finetunes"][:3]}  # a user's --prices file: rows of each kind
ENGINE_FILES = {  # engines/engine_file.py's and the README's examples, every field given once
    "vllm-docker.yaml": {"engine": "vllm-docker", "model": "meta-llama/Llama-3.1-8B-Instruct", "gpus": "all",
                         "tensor_parallel_size": 1, "max_num_seqs": 256, "gpu_memory_fraction": 0.9,
                         "max_model_len": 8192, "args": {"enable-prefix-caching": True}, "replicas": 1,
                         "router_args": {"balance-abs-threshold": 2}, "lora": {"sql": "/adapters/sql"}},
    "container.yaml": {"engine": "container", "name": "mine", "image": "localhost/server:1", "command": ["serve"],
                       "container_port": 8000, "served_model": "m", "env": {"LOG_LEVEL": "info"},
                       "volumes": {"/data": "/data:ro"}, "gpus": [0, 1], "working_dir": "/srv", "ready_timeout_s": 60,
                       "cpus": [0, 1], "port": 8001},
}
TUNE = {"configs": [{"max-num-seqs": 64}, {"name": "big", "max-num-seqs": 256, "max-num-batched-tokens": 4096}]}
SAMPLES = {**{f"scenario {name}": doc for name, doc in SCENARIOS.items()}, "prices.yaml": PRICE_FILE,
           **{f"engine {name}": doc for name, doc in ENGINE_FILES.items()}, "tune.yaml": TUNE}


def _read(test: str, sample: str, path: Path, mutation: object = None) -> None:
    if sample.startswith("scenario"):
        outcome(test, lambda: load_scenario(str(path)), ScenarioError, path, mutation)  # type: ignore[arg-type]
    elif sample == "prices.yaml":
        outcome(test, lambda: load_catalog([path]), PriceError, path, mutation)  # type: ignore[arg-type]
    elif sample.startswith("engine"):
        outcome(test, lambda: load_engine_file(path), ValueError, path, mutation)  # type: ignore[arg-type]
    else:
        outcome(test, lambda: read_configs(path), TuneError, path, mutation)  # type: ignore[arg-type]


@fuzz(500)
@given(st.sampled_from(list(SAMPLES)), st.data())
def test_yaml_inputs_mutated_are_read_or_refused_naming_file_and_field(fuzz_dir: Path, sample: str,
                                                                       data: st.DataObject) -> None:
    """A scenario, price file, engine file or tune configuration with one value, key (a number or a bool as a key
    too) or list changed anywhere is read, or refused with the reader's own error naming the file and the field."""
    mutation = data.draw(mutations(SAMPLES[sample], yaml_keys=True))
    test = f"yaml: {sample.split()[0].removesuffix('.yaml')}, structure"
    path = write(fuzz_dir, sample.split()[-1], to_yaml(mutation.document), test)
    _read(test, sample, path, mutation)


@fuzz(300)
@given(st.sampled_from(list(SAMPLES)), st.data())
def test_yaml_bytes_mutated_are_read_or_refused_naming_the_file(fuzz_dir: Path, sample: str,
                                                                data: st.DataObject) -> None:
    """Any of them cut, flipped, with garbage or bad UTF-8 inserted (a tab, an anchor, a tag): read, or refused
    naming the file."""
    raw = to_yaml(SAMPLES[sample]).encode()
    test = "yaml: bytes"
    path = write(fuzz_dir, sample.split()[-1], data.draw(byte_mutations(raw)), test)
    _read(test, sample, path)


def test_yaml_a_billion_laughs_and_python_tags_are_refused_as_data(tmp_path: Path) -> None:
    """YAML's own attacks: aliases that expand tenfold per level to 10^9 values in 400 bytes, refused before any
    reader walks them; a tag asking to build a Python object or run a command, refused naming the file (nothing
    is built or run)."""
    laughs = "  a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"  {chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))
    said = {}
    for attack, text in (("laughs", f"name: laughs\nload:\n{laughs}"),
                         ("tag", "name: x\nworkload: !!python/object/apply:os.system ['touch pwned']\n")):
        path = tmp_path / f"{attack}.yaml"
        path.write_text(text)
        with pytest.raises(ScenarioError) as caught:
            load_scenario(str(path))
        said[attack] = str(caught.value)
        assert said[attack].startswith(str(path)) and "\n" not in said[attack]
    assert "aliases" in said["laughs"] and "python/object" in said["tag"]
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()
