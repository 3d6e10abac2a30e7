"""`bench import --from guidellm|aiperf`: guidellm's benchmarks.json and aiperf's profile_export_aiperf.json
(written here in each tool's shape, from its documented fields) as run directories read like measured ones."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench.flows.importing import import_results
from bench.imports import ImportFileError, read_levels
from bench.run.rundir import read_run
from loadgen.types import SLO


def distribution(mean: float, median: float, p90: float, p95: float, p99: float) -> dict[str, Any]:
    """guidellm's StatusDistributionSummary: one distribution per request status."""
    successful = {"mean": mean, "median": median, "mode": median, "variance": 1.0, "std_dev": 1.0, "min": 0.0,
                  "max": p99 * 1.1, "count": 10, "total_sum": mean * 10,
                  "percentiles": {"p001": 0.0, "p01": 0.0, "p05": 0.0, "p10": 0.0, "p25": 0.0, "p50": median,
                                  "p75": median, "p90": p90, "p95": p95, "p99": p99, "p999": p99}}
    return {"successful": successful, "errored": None, "incomplete": None, "total": successful}


def guidellm_benchmark(strategy: dict[str, Any], scale: float) -> dict[str, Any]:
    """One benchmark of a GenerativeBenchmarksReport; `scale` makes each strategy's figures its own."""
    return {
        "type_": "generative_benchmark", "id_": f"b{scale}", "run_id": "run-1", "run_index": 0,
        "config": {"strategy": strategy, "backend": {"type_": "openai_http", "model": "Qwen/Qwen3-8B",
                                                     "target": "http://localhost:8000"}},
        "start_time": 1000.0, "end_time": 1030.0, "duration": 30.0,
        "metrics": {
            "request_totals": {"successful": 60, "errored": 2, "incomplete": 1, "total": 63},
            "requests_per_second": distribution(2.0 * scale, 2.0 * scale, 2.2, 2.3, 2.4),
            "request_concurrency": distribution(3.6 * scale, 3.5 * scale, 4, 4, 4),
            "request_latency": distribution(1.8, 1.7, 2.4, 2.6, 3.1),  # seconds
            "prompt_token_count": distribution(256.0, 256.0, 256, 256, 256),
            "output_token_count": distribution(128.0, 128.0, 128, 128, 128),
            "time_to_first_token_ms": distribution(90.0 * scale, 85.0 * scale, 120, 130.0 * scale, 160),
            "time_per_output_token_ms": distribution(14.0, 14.0, 15, 16, 18),
            "inter_token_latency_ms": distribution(13.5, 13.2, 14.5, 15.0, 17.0),
            "output_tokens_per_second": distribution(256.0 * scale, 250.0, 280, 290, 300),
            "tokens_per_second": distribution(768.0 * scale, 760.0, 800, 810, 820),
        },
    }


def guidellm_file(path: Path) -> Path:
    strategies = [{"type_": "synchronous"}, {"type_": "concurrent", "streams": 4},
                  {"type_": "throughput", "max_concurrency": None},
                  {"type_": "poisson", "rate": 2.5, "random_seed": 42, "max_concurrency": 16},
                  {"type_": "constant", "rate": 1.0}]
    benchmarks = [guidellm_benchmark(strategy, scale) for scale, strategy in enumerate(strategies, start=1)]
    path.write_text(json.dumps({"metadata": {"version": 2, "guidellm_version": "0.8.1", "python_version": "3.12",
                                             "platform": "Linux"},
                                "args": {"target": "http://localhost:8000", "profile": "sweep"},
                                "benchmarks": benchmarks}))
    return path


def aiperf_metric(unit: str, avg: float, p50: float | None = None, p95: float | None = None) -> dict[str, Any]:
    """aiperf's JsonMetricResult."""
    p50, p95 = p50 if p50 is not None else avg, p95 if p95 is not None else avg
    return {"unit": unit, "avg": avg, "p1": p50 * 0.5, "p5": p50 * 0.6, "p10": p50 * 0.7, "p25": p50 * 0.9,
            "p50": p50, "p75": p95 * 0.9, "p90": p95 * 0.95, "p95": p95, "p99": p95 * 1.2, "min": p50 * 0.4,
            "max": p95 * 1.5, "std": 1.0, "count": 40}


def aiperf_export(input_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": "1.4", "aiperf_version": "0.13.0", "benchmark_id": "5f1c",
        "request_throughput": aiperf_metric("requests/sec", 3.2),
        "request_latency": aiperf_metric("ms", 2450.0, 2400.0, 3100.0),
        "request_count": aiperf_metric("requests", 96),
        "error_request_count": aiperf_metric("requests", 4),
        "time_to_first_token": aiperf_metric("ms", 110.0, 100.0, 180.0),
        "inter_token_latency": aiperf_metric("ms", 18.0, 17.5, 22.0),
        "inter_chunk_latency": aiperf_metric("ms", 18.2, 17.8, 23.0),
        "output_token_throughput": aiperf_metric("tokens/sec", 409.6),
        "input_sequence_length": aiperf_metric("tokens", 512.0),
        "output_sequence_length": aiperf_metric("tokens", 128.0),
        "total_isl": aiperf_metric("tokens", 96 * 512), "total_osl": aiperf_metric("tokens", 96 * 128),
        "benchmark_duration": aiperf_metric("sec", 30.0),
        "input_config": input_config, "was_cancelled": False, "is_complete": True, "incomplete_reason": None,
    }


PHASES_CONFIG = {  # aiperf 0.13's BenchmarkConfig: models and phases
    "models": {"strategy": "round_robin", "items": [{"name": "meta-llama/Llama-3.1-8B-Instruct"}]},
    "endpoint": {"urls": ["http://localhost:8000"], "type": "chat", "streaming": True},
    "phases": [{"name": "warmup", "kind": "warmup", "type": "concurrency", "concurrency": 2, "requests": 10,
                "exclude_from_results": True},
               {"name": "profiling", "kind": "profiling", "type": "concurrency", "concurrency": 8,
                "requests": 100}]}
LOADGEN_CONFIG = {  # the user config as aiperf documents it: endpoint.model_names and loadgen
    "endpoint": {"model_names": ["Qwen/Qwen3-8B"], "type": "chat", "streaming": True},
    "loadgen": {"concurrency": None, "request_rate": 2.0, "request_count": 60}}


def aiperf_file(path: Path, config: dict[str, Any] = PHASES_CONFIG, **changes: Any) -> Path:
    raw = aiperf_export(copy.deepcopy(config))
    raw.update(changes)
    path.write_text(json.dumps({k: v for k, v in raw.items() if v is not ...}))
    return path


def test_guidellm_benchmarks_become_a_level_per_strategy_every_field_mapped(tmp_path: Path) -> None:
    levels = read_levels("guidellm", [guidellm_file(tmp_path / "benchmarks.json")])
    assert [level.label for level in levels] == ["c1", "c4", "c11", "r2.5", "r1"]
    assert {level.tool_version for level in levels} == {"0.8.1"}
    assert {level.model for level in levels} == {"Qwen/Qwen3-8B"}
    c4 = levels[1].summary
    assert c4 is not None and (c4.kind, c4.target) == ("concurrency", 4.0)
    # every figure read from its field, in this toolkit's units
    assert (c4.requests.num_ok, c4.requests.num_failed, c4.requests.num_requests) == (60, 3, 63)  # incomplete fail
    assert c4.throughput.request_per_s == 4.0 and c4.throughput.output_tokens_per_s == 512.0
    assert c4.throughput.total_tokens_per_s == 1536.0 and c4.throughput.window_s == 30.0
    assert c4.throughput.mean_in_flight == 7.2 and not c4.throughput.is_steady_window
    assert (c4.latency.ttft_ms.mean, c4.latency.ttft_ms.p50, c4.latency.ttft_ms.p95) == (180.0, 170.0, 260.0)
    assert c4.latency.tpot_ms.p50 == 13.2 and c4.latency.tpot_ms.p99 == 17.0  # guidellm's ITL is our TPOT
    assert c4.latency.itl_ms.p50 is None and c4.latency.icl_ms.p50 is None  # not in the file
    assert c4.latency.e2e_ms.p50 == 1700.0 and c4.latency.e2e_ms.p95 == 2600.0  # seconds read as ms
    assert c4.tokens.mean_input_tokens == 256.0 and c4.tokens.mean_output_tokens == 128.0
    notes = " | ".join(c4.notes)
    assert "imported from guidellm 0.8.1 (benchmarks.json): concurrent: 4 streams" in notes
    assert "no per-request records" in notes and "read as this toolkit's TPOT" in notes
    assert "1 requests were cut off" in notes
    # the throughput strategy had no cap: labelled by its mean concurrency, and said so
    assert "labelled by its mean concurrency, 10.8" in " ".join(levels[2].notes)
    poisson = levels[3].summary
    assert poisson is not None and (poisson.kind, poisson.target) == ("rate", 2.5)
    assert "Poisson arrivals, at most 16 in flight" in poisson.notes[0]


def test_guidellm_missing_and_malformed_fields(tmp_path: Path) -> None:
    path = guidellm_file(tmp_path / "benchmarks.json")
    raw = json.loads(path.read_text())
    del raw["benchmarks"][0]["metrics"]["time_to_first_token_ms"]
    path.write_text(json.dumps(raw))
    c1 = read_levels("guidellm", [path])[0].summary
    assert c1 is not None and c1.latency.ttft_ms.p50 is None
    assert "the file gives no time_to_first_token_ms: not known for this level" in c1.notes
    for change, field in [
        (lambda r: r["benchmarks"][1]["metrics"]["request_totals"].update(errored="two"),
         "benchmarks[1].metrics.request_totals.errored is 'two'"),
        (lambda r: r["benchmarks"][1]["config"]["strategy"].update(streams=0),
         "benchmarks[1].config.strategy.streams is 0"),
        (lambda r: r["benchmarks"][3]["config"]["strategy"].update(type_="sweep"),
         "benchmarks[3].config.strategy.type_ is 'sweep'"),
        (lambda r: r["benchmarks"][0]["metrics"]["output_tokens_per_second"]["successful"].update(mean="fast"),
         "benchmarks[0].metrics.output_tokens_per_second.successful.mean is 'fast'"),
        (lambda r: r["benchmarks"][0].update(duration=None), "benchmarks[0].duration is missing"),
        (lambda r: r.update(benchmarks={}), "benchmarks is {}"),
    ]:
        bad = json.loads(guidellm_file(tmp_path / "ok.json").read_text())
        change(bad)
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(ImportFileError, match=re.escape(f"bad.json: {field}")):
            read_levels("guidellm", [tmp_path / "bad.json"])


def test_aiperf_export_becomes_a_level_in_both_config_shapes(tmp_path: Path) -> None:
    (c8,) = read_levels("aiperf", [aiperf_file(tmp_path / "profile_export_aiperf.json")])
    assert (c8.label, c8.model, c8.tool_version) == ("c8", "meta-llama/Llama-3.1-8B-Instruct", "0.13.0")
    s = c8.summary
    assert s is not None and (s.kind, s.target) == ("concurrency", 8.0)  # the warm-up phase left out
    assert (s.requests.num_ok, s.requests.num_failed) == (96, 4)
    assert s.throughput.request_per_s == 3.2 and s.throughput.output_tokens_per_s == 409.6
    assert s.throughput.total_tokens_per_s == pytest.approx(96 * 640 / 30) and s.throughput.window_s == 30.0
    assert (s.latency.ttft_ms.mean, s.latency.ttft_ms.p50, s.latency.ttft_ms.p95) == (110.0, 100.0, 180.0)
    assert s.latency.tpot_ms.p50 == 17.5 and s.latency.icl_ms.p95 == 23.0 and s.latency.itl_ms.p50 is None
    assert s.latency.e2e_ms.p95 == 3100.0 and s.tokens.mean_input_tokens == 512.0
    assert "imported from aiperf 0.13.0 (profile_export_aiperf.json): concurrency: 8 requests at once" in s.notes
    assert any("profile_export.jsonl is not read" in note for note in s.notes)

    # the documented user config (loadgen, endpoint.model_names), in seconds where aiperf could write them
    seconds = aiperf_metric("sec", 2.45, 2.4, 3.1)
    (r2,) = read_levels("aiperf", [aiperf_file(tmp_path / "r2.json", LOADGEN_CONFIG, request_latency=seconds,
                                               inter_chunk_latency=None, was_cancelled=True,
                                               incomplete_reason="record stall")])
    assert (r2.label, r2.model) == ("r2", "Qwen/Qwen3-8B")
    s = r2.summary
    assert s is not None and s.kind == "rate" and s.latency.e2e_ms.p95 == pytest.approx(3100.0)
    assert s.throughput.mean_in_flight == pytest.approx(3.2 * 2.45)  # Little's law at a rate
    assert "the file gives no inter_chunk_latency: not known for this level" in s.notes
    assert any("did not finish (record stall)" in note for note in s.notes)


@pytest.mark.parametrize(("changes", "field"), [
    ({"request_count": None}, "request_count is missing"),
    ({"time_to_first_token": aiperf_metric("minutes", 1.0)}, "time_to_first_token.unit is 'minutes'"),
    ({"output_token_throughput": {"unit": "tokens/sec", "avg": "many"}}, "output_token_throughput.avg is 'many'"),
    ({"request_throughput": [3.2]}, "request_throughput is [3.2]"),
    ({"input_config": None}, "input_config is missing"),
    ({"input_config": {**PHASES_CONFIG, "phases": [{"name": "profiling", "type": "poisson", "rate": None}]}},
     "input_config.phases[0].rate is missing"),
    ({"input_config": {**PHASES_CONFIG, "phases": [{"name": "a", "type": "concurrency", "concurrency": 2},
                                                   {"name": "b", "type": "concurrency", "concurrency": 4}]}},
     "input_config.phases has 2 phases past the warm-up"),
])
def test_aiperf_malformed_export_refused_naming_the_field(tmp_path: Path, changes: dict[str, Any],
                                                          field: str) -> None:
    path = aiperf_file(tmp_path / "bad.json", **changes)
    with pytest.raises(ImportFileError, match=re.escape(f"bad.json: {field}")):
        read_levels("aiperf", [path])


def test_peer_runs_read_by_report_and_compare_with_their_source(tmp_path: Path, cli) -> None:
    runs = tmp_path / "runs"
    imported = cli("import", str(guidellm_file(tmp_path / "benchmarks.json")), "--from", "guidellm",
                   "--engine", "vllm", "--out", str(runs))
    assert imported.exit_code == 0, imported.output
    guidellm_dir = Path(imported.output.split("run directory:")[1].split()[0])
    # two aiperf exports at the same load: a level and its repeat, summarized with an interval
    first, second = aiperf_file(tmp_path / "a.json"), aiperf_file(
        tmp_path / "b.json", request_throughput=aiperf_metric("requests/sec", 3.0),
        output_token_throughput=aiperf_metric("tokens/sec", 384.0))
    aiperf_dir = import_results([first, second], "aiperf", runs, engine="sglang")
    run = read_run(aiperf_dir)
    assert [s.level for s in run.summaries] == ["c8", "c8#2"] and {s.engine for s in run.summaries} == {"sglang"}
    (repeated,) = run.repeated
    interval = repeated.figures["output_tokens_per_s"]
    assert interval.values == (409.6, 384.0) and interval.low < 396.8 < interval.high
    info = json.loads((aiperf_dir / "run.json").read_text())
    assert info["imported"]["tool"] == "aiperf" and info["imported"]["version"] == "0.13.0"
    assert info["imported"]["engine"] == "sglang" and info["engine"]["name"] == "sglang"
    assert {s.engine for s in read_run(guidellm_dir).summaries} == {"vllm"}

    compared = cli("compare", str(guidellm_dir), str(aiperf_dir))
    assert compared.exit_code == 0, compared.output
    assert "imported from guidellm 0.8.1" in compared.output and "imported from aiperf 0.13.0" in compared.output
    report = cli("report", str(guidellm_dir), str(aiperf_dir), "--gpu-price", "2", "--provider", "llama-3.1-8b",
                 "--out", str(tmp_path / "report.html"))
    assert report.exit_code == 0, report.output
    markdown = (tmp_path / "report.md").read_text()
    assert "imported from guidellm 0.8.1" in markdown and "imported from aiperf 0.13.0" in markdown
    assert "imported from another tool's results, so the run does not record the hardware" in markdown
    assert "lacks, or holds in a form this version does not read" not in markdown  # an import never had them
    assert "c1, c4, c11, r2.5, r1: no per-request records" in markdown  # a shared note said once


def test_an_slo_on_a_latency_a_peer_file_lacks_makes_its_level_invalid(tmp_path: Path) -> None:
    run_dir = import_results([aiperf_file(tmp_path / "a.json", request_latency=None)], "aiperf", tmp_path / "runs")
    (c8,) = read_run(run_dir, SLO(e2e_ms=4000)).summaries
    assert not c8.is_valid and "no p95 E2E" in c8.invalid_reasons[0]
    (c8,) = read_run(run_dir, SLO(ttft_ms=500)).summaries
    assert c8.is_valid  # the file gives TTFT's p95


def test_an_imported_run_is_exported_and_kept_in_the_history_with_its_source(tmp_path: Path, cli) -> None:
    import sqlite3

    from bench.exports.llmd_schema import BenchmarkReport
    from bench.run.history import history_path

    runs = tmp_path / "runs"
    run_dir = import_results([guidellm_file(tmp_path / "benchmarks.json")], "guidellm", runs)
    exported = cli("export", str(run_dir), "--format", "llmd-report", "--out", str(tmp_path / "out"))
    assert exported.exit_code == 0, exported.output
    summaries = {s.level: s for s in read_run(run_dir).summaries}
    files = sorted((tmp_path / "out").glob("benchmark-report-*.json"))
    assert len(files) == 5
    for path in files:
        report = BenchmarkReport.model_validate(json.loads(path.read_text()))
        s = summaries[report.metrics.metadata["level"]]
        ttft, tpot = report.metrics.latency.time_to_first_token, report.metrics.latency.time_per_output_token
        assert (ttft.mean, ttft.p50, ttft.p95, ttft.min) == (s.latency.ttft_ms.mean, s.latency.ttft_ms.p50,
                                                            s.latency.ttft_ms.p95, None)  # only what it gave
        assert tpot is not None and tpot.p99 == s.latency.tpot_ms.p99
        assert report.metrics.latency.inter_token_latency is None  # not in a guidellm file
        assert report.metrics.requests.failures == s.requests.num_failed
        assert report.scenario.load.name == "guidellm"
        assert report.metadata["source"].startswith("imported from guidellm 0.8.1: ")
    with sqlite3.connect(history_path(runs)) as db:
        rows = db.execute("SELECT level, source FROM levels ORDER BY level").fetchall()
    assert rows == [(level, "imported from guidellm 0.8.1") for level in sorted(summaries)]


PEERS = Path(__file__).parent / "data" / "peers"


def test_files_the_tools_themselves_wrote_are_read_as_they_say() -> None:
    """guidellm 0.8.1 (`guidellm run --profile kind=concurrent --override profile.streams 1,2`, its request
    samples left out for size) and aiperf 0.13.0 (`aiperf profile --concurrency 2 --request-count 8`), each run
    against this toolkit's reference engine serving SmolLM2: the figures are the ones they wrote."""
    path = PEERS / "guidellm-0.8.1-benchmarks.json"
    raw = json.loads(path.read_text())
    levels = read_levels("guidellm", [path])
    assert [level.label for level in levels] == ["c1", "c2"]
    for level, benchmark in zip(levels, raw["benchmarks"], strict=True):
        s, metrics = level.summary, benchmark["metrics"]
        assert s is not None and level.model == "SmolLM2-135M-Instruct.Q4_1" and level.tool_version == "0.8.1"
        assert s.requests.num_ok == metrics["request_totals"]["successful"] == 8
        assert s.throughput.output_tokens_per_s == metrics["output_tokens_per_second"]["successful"]["mean"]
        assert s.latency.ttft_ms.p95 == metrics["time_to_first_token_ms"]["successful"]["percentiles"]["p95"]
        assert s.latency.tpot_ms.p50 == metrics["inter_token_latency_ms"]["successful"]["median"]
        assert s.latency.e2e_ms.p50 == pytest.approx(metrics["request_latency"]["successful"]["median"] * 1000)
        assert s.throughput.window_s == benchmark["duration"]

    path = PEERS / "aiperf-0.13.0-profile_export_aiperf.json"
    raw = json.loads(path.read_text())
    (level,) = read_levels("aiperf", [path])
    s = level.summary
    assert (level.label, level.model, level.tool_version) == ("c2", "SmolLM2-135M-Instruct.Q4_1", "0.13.0")
    assert s is not None and s.requests.num_ok == 8 and s.requests.num_failed == 0
    assert s.throughput.output_tokens_per_s == raw["output_token_throughput"]["avg"]
    assert s.throughput.window_s == raw["benchmark_duration"]["avg"]
    assert s.latency.ttft_ms.p95 == raw["time_to_first_token"]["p95"]
    assert s.latency.tpot_ms.p50 == raw["inter_token_latency"]["p50"]
    assert s.latency.icl_ms.p99 == raw["inter_chunk_latency"]["p99"]
    assert s.tokens.mean_input_tokens == raw["input_sequence_length"]["avg"] == 32
