"""LoRA adapter names become `NAME=PATH` flags and /adapters/NAME mount targets: a name with `..`, `/`, `:` or `=`
given by a flag, an engine file or an --adapters-dir listing is refused before anything starts, naming where it
came from and the shape accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.lora import LoraFlagError, container_mounts, lora_flags

HOSTILE = ["../../etc", "x:rw", "a=b", "sql/../../x", "..", ".hidden", "-flag", "x" * 65]


def adapter(folder: Path) -> Path:
    """A folder that passes as a PEFT LoRA adapter of rank 8 (all bench reads of one before launching)."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "peft_type": "LORA"}))
    return folder


def sweep(cli, tmp_path: Path, *flags: str):
    return cli("sweep", "--engine", "endpoint", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
               "--no-report", "--out", str(tmp_path / "runs"), *flags)


@pytest.mark.parametrize("name", [n for n in HOSTILE if "=" not in n])  # NAME=PATH: the first `=` ends the name
def test_a_lora_flag_naming_an_adapter_outside_its_folder_is_refused(tmp_path: Path, cli, name: str) -> None:
    path = adapter(tmp_path / "sql")
    said = sweep(cli, tmp_path, "--lora", f"{name}={path}")
    assert said.exit_code == 2, said.output
    assert "--lora" in said.output and "adapter name" in said.output and "letters, digits" in said.output
    assert not (tmp_path / "runs").exists()  # refused before anything was made


def test_an_adapters_dir_listing_with_a_name_a_mount_would_break_on_is_refused(tmp_path: Path, cli) -> None:
    adapter(tmp_path / "adapters" / "sql")
    adapter(tmp_path / "adapters" / "x:rw")  # /adapters/x:rw:ro would mount it writable
    said = sweep(cli, tmp_path, "--adapters-dir", str(tmp_path / "adapters"))
    assert said.exit_code == 2, said.output
    assert "--adapters-dir" in said.output and "'x:rw'" in said.output


def test_an_engine_file_lora_name_is_refused_before_its_container_is_made(tmp_path: Path, cli) -> None:
    path = adapter(tmp_path / "sql")
    engine_file = tmp_path / "engine.yaml"
    engine_file.write_text(f"engine: vllm-docker\nmodel: m\nlora:\n  '../../root/.ssh': {path}\n")
    said = cli("sweep", "--engine-file", str(engine_file), "--no-report", "--out", str(tmp_path / "runs"))
    assert said.exit_code == 2, said.output
    assert "adapter name '../../root/.ssh' is not accepted" in said.output


@pytest.mark.parametrize("name", HOSTILE)
def test_every_engine_refuses_an_adapter_name_that_is_not_plain(tmp_path: Path, name: str) -> None:
    path = str(adapter(tmp_path / "sql"))
    for kind in ("reference", "vllm", "sglang", "vllm-docker"):
        with pytest.raises(LoraFlagError, match="is not accepted; expected 1 to 64 letters"):
            lora_flags(kind, {name: path}, {}, in_container=kind.endswith("-docker"))
    with pytest.raises(LoraFlagError):
        container_mounts({name: path})


def test_plain_names_are_mounted_read_only_under_adapters(tmp_path: Path) -> None:
    path = adapter(tmp_path / "sql")
    assert container_mounts({"sql-v2.1_a": str(path)}) == {str(path.resolve()): "/adapters/sql-v2.1_a:ro"}
    assert "sql-v2.1_a=/adapters/sql-v2.1_a" in lora_flags("vllm-docker", {"sql-v2.1_a": str(path)}, {}, True)
