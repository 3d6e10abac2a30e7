"""Adapters handed to each engine in its own flags (`engines.lora`), and mounted for a container."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.engine_file import EngineFile
from engines.lora import LoraFlagError, container_mounts, lora_flags
from engines.registry import EngineError, make_launcher


@pytest.fixture
def adapters(tmp_path: Path) -> dict[str, str]:
    found = {}
    for name, rank in (("sql", 8), ("chat", 12)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": 16}))
        found[name] = str(tmp_path / name)
    return found


def test_each_engine_gets_its_own_flags_the_count_and_the_highest_rank(adapters: dict[str, str]) -> None:
    pairs = [f"sql={adapters['sql']}", f"chat={adapters['chat']}"]
    assert lora_flags("reference", adapters, {}) == ["--lora-modules", *pairs, "--max-loras", "2",
                                                      "--max-lora-rank", "12"]
    # vLLM takes only some ranks: 12 is served as 16
    assert lora_flags("vllm", adapters, {}) == ["--enable-lora", "--lora-modules", *pairs, "--max-loras", "2",
                                                 "--max-lora-rank", "16"]
    assert lora_flags("sglang", adapters, {"max-loras-per-batch": "1"}) == [
        "--enable-lora", "--lora-paths", *pairs, "--max-lora-rank", "12"]  # a count given is left as given
    assert lora_flags("vllm-docker", adapters, {"max-lora-rank": "64"}, in_container=True) == [
        "--enable-lora", "--lora-modules", "sql=/adapters/sql", "chat=/adapters/chat", "--max-loras", "2"]
    assert container_mounts(adapters) == {adapters["sql"]: "/adapters/sql:ro", adapters["chat"]: "/adapters/chat:ro"}


def test_a_container_launcher_mounts_the_adapters_and_passes_their_flags(adapters: dict[str, str]) -> None:
    from engines import docker

    seen = {}

    def capture(o: docker.ContainerOptions) -> docker.ContainerSpec:
        seen["options"] = o
        return docker.vllm_spec(o)

    from engines.registry import _engine_image

    _engine_image(capture, EngineFile(engine="vllm-docker", model="m", lora=adapters))
    spec = docker.vllm_spec(seen["options"])
    assert spec.volumes[adapters["sql"]] == "/adapters/sql:ro"
    assert spec.command[-8:] == ["--enable-lora", "--lora-modules", "sql=/adapters/sql", "chat=/adapters/chat",
                                 "--max-loras", "2", "--max-lora-rank", "16"]


def test_an_engine_without_adapters_or_a_folder_without_a_config_is_refused(adapters: dict[str, str],
                                                                           tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="engine 'ollama' is not given LoRA adapters"):
        make_launcher(EngineFile(engine="ollama", lora=adapters))
    with pytest.raises(LoraFlagError, match="can't be read as a PEFT adapter config"):
        lora_flags("vllm", {"x": str(tmp_path)}, {})
