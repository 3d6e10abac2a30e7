"""LoRA adapters served: the scheduler's --max-loras, the prefix cache kept apart per adapter, and the HTTP
side (a request names its adapter as `model`, /v1/models lists them with their base, /metrics publishes vLLM's
vllm:lora_requests_info), on dummy:tiny over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engines.reference.core.block_manager import BlockManager
from engines.reference.core.config import EngineConfig
from engines.reference.core.scheduler import Scheduler
from engines.reference.core.sequence import Sequence
from engines.reference.loading.lora import AdapterError, parse_lora_modules, write_random_adapter
from engines.reference.loading.weights import DUMMY_PRESETS
from engines.reference.serving.options import ServerOptions, parse_args
from engines.reference.serving.server import build_engine, running_server


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {name: write_random_adapter(root / name, DUMMY_PRESETS["tiny"], rank=4, seed=i, std=0.3)
            for i, name in enumerate(("sql", "chat", "code"))}  # fmt: skip


def test_adapters_past_max_loras_wait_and_later_ones_that_fit_go_ahead() -> None:
    """max_loras=2: a third adapter's request waits while two run; a request of a running adapter, and one of
    the base model, are admitted past it; once an adapter leaves, the waiting one runs."""
    scheduler = Scheduler(EngineConfig(num_kv_blocks=64, block_size=4, max_loras=2, max_model_len=64))
    seqs = [Sequence("a", [1, 2, 3], adapter="sql"), Sequence("b", [4, 5, 6], adapter="chat"),
            Sequence("c", [7, 8, 9], adapter="code"), Sequence("d", [1, 9, 9], adapter="sql"),
            Sequence("e", [2, 2, 2])]  # fmt: skip
    for seq in seqs:
        scheduler.add(seq)
    scheduled = {entry.seq.request_id for entry in scheduler.schedule().scheduled}
    assert scheduled == {"a", "b", "d", "e"}
    assert [seq.request_id for seq in scheduler.waiting] == ["c"] and scheduler.running_adapters() == {"sql", "chat"}
    scheduler.finish(seqs[1])  # chat leaves: code fits now
    assert "c" in {entry.seq.request_id for entry in scheduler.schedule().scheduled}


def test_the_prefix_cache_keeps_each_adapters_blocks_apart() -> None:
    """The same prompt under another adapter, or the base model, finds no block; under its own adapter it does."""
    manager = BlockManager(num_blocks=64, block_size=4, enable_prefix_caching=True)
    prompt = list(range(1, 14))
    first = Sequence("first", prompt, adapter="sql")
    manager.allocate(first)
    manager.mark_computed(first, len(prompt))  # its three full blocks are cached under "sql"
    manager.free(first)
    for request_id, adapter, hits in (("base", None, 0), ("chat", "chat", 0), ("sql-again", "sql", 12)):
        seq = Sequence(request_id, prompt, adapter=adapter)
        manager.allocate(seq)
        assert seq.num_cached_tokens == hits, (adapter, seq.num_cached_tokens)
        manager.free(seq)


def test_a_bad_lora_module_flag_is_refused_naming_it(adapters: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match="expected NAME=PATH"):
        parse_lora_modules(["sql"])
    with pytest.raises(AdapterError, match="given twice"):
        parse_lora_modules([f"sql={adapters['sql']}", f"sql={adapters['chat']}"])
    for hostile in ("<img src=x onerror=alert(1)>", "a b", "x\nINJECTED 1", "../up", "a" * 129):
        with pytest.raises(AdapterError, match="the name must be 1 to 128 letters"):
            parse_lora_modules([f"{hostile}={adapters['sql']}"])
    assert parse_lora_modules([f"org/sql-v1.2={adapters['sql']}"]) == {"org/sql-v1.2": str(adapters["sql"])}
    options = ServerOptions(model="dummy:tiny", port=0, kv_cache_tokens=1024, lora_modules=(f"x={tmp_path}",))
    with pytest.raises(AdapterError, match="no adapter_config.json"):
        build_engine(options)
    options = ServerOptions(model="dummy:tiny", port=0, kv_cache_tokens=1024, max_lora_rank=2,
                            lora_modules=(f"sql={adapters['sql']}",))  # fmt: skip
    with pytest.raises(AdapterError, match="over --max-lora-rank 2"):
        build_engine(options)
    assert parse_args(["--lora-modules", "a=/x", "b=/y", "--max-loras", "3"]).lora_modules == ("a=/x", "b=/y")


def test_the_server_serves_each_adapter_by_name_and_says_which_run(adapters: dict[str, Path]) -> None:
    modules = tuple(f"{name}={path}" for name, path in adapters.items())
    options = ServerOptions(model="dummy:tiny", port=0, kv_cache_tokens=4096, max_model_len=512, max_loras=2,
                            lora_modules=modules)  # fmt: skip
    with running_server(options) as server:
        base_url = server.base_url
        models = httpx.get(f"{base_url}/models").json()["data"]
        assert [m["id"] for m in models] == ["dummy:tiny", "sql", "chat", "code"]
        assert [m["parent"] for m in models] == [None, "dummy:tiny", "dummy:tiny", "dummy:tiny"]
        assert [m["root"] for m in models[1:]] == ["sql", "chat", "code"]  # no host path is shown
        assert not any(str(path) in json.dumps(models) for path in adapters.values())

        async def ask_all() -> list[dict]:
            async with httpx.AsyncClient(timeout=60) as client:
                bodies = [{"model": m, "prompt": "the same prompt", "max_tokens": 6, "temperature": 0,
                           "ignore_eos": True} for m in ("dummy:tiny", "sql", "chat", "code", "sql")]  # fmt: skip
                answers = await asyncio.gather(*(client.post(f"{base_url}/completions", json=b) for b in bodies))
                return [a.json() for a in answers]

        answers = asyncio.run(ask_all())
        assert [a["model"] for a in answers] == ["dummy:tiny", "sql", "chat", "code", "sql"]
        texts = [a["choices"][0]["text"] for a in answers]
        assert texts[1] == texts[4] and len(set(texts[:4])) == 4  # each adapter answers its own way, greedy
        missing = httpx.post(f"{base_url}/completions", json={"model": "nope", "prompt": "x", "max_tokens": 1})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
        families = {f.name: f for f in text_string_to_metric_families(httpx.get(base_url[:-3] + "/metrics").text)}
        (sample,) = families["vllm:lora_requests_info"].samples
        assert sample.labels == {"max_lora": "2", "running_lora_adapters": "", "waiting_lora_adapters": ""}
        assert sample.value > 1.7e9  # the time it was seen, as vLLM's
