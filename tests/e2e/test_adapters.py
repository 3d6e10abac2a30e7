"""Traffic across LoRA adapters, against the scripted server (which logs the model each request asks for):
records carry their adapter, the mix's shares follow the seed, each level's figures per adapter add up to
the level's, and a sweep across adapter counts runs the base model alone beside them."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from loadgen.adapters import AdapterMix
from tests.bench.test_cli import bench, only_run_dir, sweep_args

WEIGHTS = (0.6, 0.3, 0.1)


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]


def test_each_request_asks_its_adapter_of_the_seeded_mix_and_each_level_reports_them(scripted, tmp_path, cli) -> None:
    scripted.set_script(ttft_ms=2, itl_ms=1, adapters=["sql", "chat", "code"])
    scripted.models()  # the server's log, emptied
    result = cli(*sweep_args(scripted, tmp_path, "--concurrency", "8", "--requests", "400", "--warmup", "0",
                             "--output-tokens", "4", "--input-tokens", "8", "--adapters", "sql,chat,code",
                             "--adapter-mix", "weights:" + ",".join(map(str, WEIGHTS)), "--seed", "5", "--no-report"))
    assert result.exit_code == 0, result.output
    run_dir = only_run_dir(tmp_path)
    rows = _rows(run_dir)
    assert len(rows) == 400 and all(r["ok"] for r in rows)
    assert Counter(r["adapter"] for r in rows) == Counter(scripted.models())  # what the server was asked
    mix = AdapterMix.parse(["sql", "chat", "code"], "weights:0.6,0.3,0.1", seed=5)
    assert all(r["adapter"] == mix.pick(r["request_id"]) for r in rows)  # each pick is the seed's
    counts = Counter(r["adapter"] for r in rows)
    for name, weight in zip(("sql", "chat", "code"), WEIGHTS, strict=True):  # within 4 standard deviations
        assert abs(counts[name] - 400 * weight) <= 4 * math.sqrt(400 * weight * (1 - weight))
    (summary,) = json.loads((run_dir / "summary.json").read_text())
    parts = {a["adapter"]: a for a in summary["adapters"]}
    assert {name: part["num_requests"] for name, part in parts.items()} == dict(counts)
    assert math.isclose(sum(p["output_tokens_per_s"] for p in parts.values()), summary["output_tokens_per_s"])
    assert "each LoRA adapter's part of its level" in result.output
    assert json.loads((run_dir / "run.json").read_text())["scenario"]["workload"]["adapters"]["mix"] == \
        "weights:0.6,0.3,0.1"


# serial: beside another worker's engine the client can fall behind, and a level run again is labelled `c2+a0~2`
# or judged invalid, so the report's rows and operating point this test reads would change
@pytest.mark.serial
def test_a_sweep_across_adapter_counts_runs_the_base_model_alone_beside_them(scripted, tmp_path, cli) -> None:
    scripted.set_script(ttft_ms=2, itl_ms=1, adapters=["a", "b", "c"])
    result = cli(*sweep_args(scripted, tmp_path, "--concurrency", "2", "--requests", "30", "--warmup", "2",
                             "--output-tokens", "4", "--input-tokens", "8", "--adapters", "a,b,c",
                             "--adapter-counts", "1,3", "--no-report"))
    assert result.exit_code == 0, result.output
    rows = [r for r in _rows(only_run_dir(tmp_path)) if not r["is_warmup"]]
    by_level = {level: {r["adapter"] for r in rows if r["level"] == level} for level in {r["level"] for r in rows}}
    assert by_level == {"c2+a0": {None}, "c2+a1": {"a"}, "c2+a3": {"a", "b", "c"}}
    assert "what each extra adapter costs" in result.output and "base alone" in result.output
    # the report prices the 3 fine-tunes on the fleet measured with all three
    run_dir = only_run_dir(tmp_path)
    report = cli("report", str(run_dir), "--monthly-tokens", "3e9", "--gpu-price", "2",
                 "--provider", "llama-3.1-8b", "--out", str(tmp_path / "report.html"))
    assert report.exit_code == 0, report.output
    markdown = (tmp_path / "report.md").read_text()
    assert "## LoRA fine-tunes: 3 adapters" in markdown and "| c2+a0 | base alone |" in markdown
    assert "self-hosted, 3 adapters on one fleet" in markdown and "at c2+a3" in markdown
    data = json.loads((tmp_path / "report.json").read_text())
    assert {o["kind"] for o in data["finetunes"]["options"]} == {"self-host", "serverless-lora", "dedicated"}


def test_an_adapter_the_server_does_not_list_is_said_before_any_request(scripted, tmp_path, cli) -> None:
    scripted.set_script(adapters=["a"])
    scripted.models()
    result = cli(*sweep_args(scripted, tmp_path, "--concurrency", "1", "--requests", "2", "--adapters", "a,zzz",
                             "--no-report"))
    assert result.exit_code != 0
    assert "does not list the adapter zzz" in result.output
    assert scripted.models() == []


def test_bad_adapter_flags_are_refused_naming_them(cli, tmp_path) -> None:
    base = ["sweep", "--engine", "endpoint", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
            "--concurrency", "1", "--out", str(tmp_path)]
    cases = [
        (["--adapters", "a,b", "--adapter-mix", "zipf:-1"], "the exponent S must be > 0"),
        (["--adapters", "a,b", "--adapter-mix", "weights:1"], "1 weights for 2 adapters"),
        (["--adapters", "a,b", "--adapter-counts", "3"], "3 is more than the 2 adapters given"),
        (["--adapter-counts", "1,2"], "name the adapters too"),
        (["--lora", "nopath"], "--lora 'nopath': expected NAME=PATH"),
        (["--lora", f"x={tmp_path}"], "no adapter_config.json there"),
        (["--adapters-dir", str(tmp_path)], "no adapter in it"),
        (["--adapters", "a", "--workload", "agent"], "agent sessions ask the base model only"),
    ]
    for extra, said in cases:
        result = cli(*base, *extra)
        assert result.exit_code == 2, (extra, result.output)
        assert said in result.output, (extra, result.output)


def test_an_engine_bench_can_not_give_adapters_to_says_so(cli, tmp_path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "adapter_config.json").write_text(json.dumps({"r": 8}))
    result = cli("sweep", "--engine", "llamacpp", "--lora", f"a={tmp_path / 'a'}", "--concurrency", "1",
                 "--out", str(tmp_path / "runs"))
    assert result.exit_code == 2
    assert "engine 'llamacpp' is not given LoRA adapters by bench" in result.output


def test_the_reference_engine_bench_starts_serves_the_folders_adapters(tmp_path) -> None:
    """`bench lora make` then `bench sweep --adapters-dir`: the engine gets each adapter and --max-loras, and the
    server's LoRA series says how many ran in a batch."""
    made = bench("lora", "make", "--base", "dummy:tiny", "--rank", "4", "--count", "3", "--out", str(tmp_path / "ad"))
    assert made.returncode == 0, made.stderr
    result = bench("sweep", "--model", "dummy:tiny", "--adapters-dir", str(tmp_path / "ad"), "--concurrency", "3",
                   "--requests", "24", "--input-tokens", "16", "--output-tokens", "8", "--no-report",
                   "--out", str(tmp_path / "runs"), timeout=180)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    command = json.loads((run_dir / "run.json").read_text())["engine"]["details"]["command"]
    at = command.index("--lora-modules")
    assert command[at + 1 : at + 4] == [f"lora-{i}={tmp_path / 'ad' / f'lora-{i}'}" for i in range(3)]
    assert command[command.index("--max-loras") + 1] == "3"
    # a fixed count of requests: the seeded picks of ids 0-23 are the same every run, and name all three
    assert {r["adapter"] for r in _rows(run_dir) if not r["is_warmup"]} == {"lora-0", "lora-1", "lora-2"}
    samples = [json.loads(line) for line in (run_dir / "telemetry.jsonl").read_text().splitlines()]
    assert any("running_adapters" in s for s in samples)  # vllm:lora_requests_info, as the sampler reads it
