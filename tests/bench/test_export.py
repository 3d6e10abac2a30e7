"""`bench export`: a run as llm-d Benchmark Reports (validated by the model of the format's documented fields,
figures as the run's summary.json gives them) and as a CSV of every figure."""

from __future__ import annotations

import csv
import json

import pytest
from pydantic import ValidationError

from bench.exports.llmd_schema import BenchmarkReport
from tests.bench.test_cli import bench, only_run_dir, sweep_args


def test_each_level_becomes_a_valid_report_whose_figures_are_the_summarys(scripted, tmp_path, cli) -> None:
    scripted.set_script(ttft_ms=5, itl_ms=2)
    result = bench(*sweep_args(scripted, tmp_path / "runs", "--concurrency", "1,3", "--requests", "12",
                               "--output-tokens", "8", "--input-tokens", "16", "--no-report"))
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    exported = cli("export", str(run_dir), "--format", "llmd-report", "--out", str(tmp_path / "out"))
    assert exported.exit_code == 0, exported.output
    summaries = {row["level"]: row for row in json.loads((run_dir / "summary.json").read_text())}
    files = sorted((tmp_path / "out").glob("benchmark-report-*.json"))
    assert [f.name for f in files] == ["benchmark-report-c1.json", "benchmark-report-c3.json"]
    for path in files:
        report = BenchmarkReport.model_validate(json.loads(path.read_text()))
        summary = summaries[report.metrics.metadata["level"]]
        latency, requests = report.metrics.latency, report.metrics.requests
        assert report.version == "0.1" and report.scenario.load.name == "llm-selfhost-bench"
        assert report.scenario.load.args["concurrency"] == summary["target"]
        assert requests.total == summary["num_requests"] and requests.failures == summary["num_failed"]
        assert latency.time_to_first_token.units == "ms" and latency.inter_token_latency.units == "ms/token"
        for stat in ("mean", "p50", "p90", "p95", "p99"):
            assert getattr(latency.time_to_first_token, stat) == pytest.approx(summary["ttft_ms"][stat])
            assert getattr(latency.time_per_output_token, stat) == pytest.approx(summary["tpot_ms"][stat])
            assert getattr(latency.inter_token_latency, stat) == pytest.approx(summary["itl_ms"][stat])
            assert getattr(latency.request_latency, stat) == pytest.approx(summary["e2e_ms"][stat])
        assert latency.time_to_first_token.min <= latency.time_to_first_token.p10 <= latency.time_to_first_token.max
        assert requests.output_length.mean == pytest.approx(summary["mean_output_tokens"])
        assert report.metrics.throughput.output_tokens_per_sec == pytest.approx(summary["output_tokens_per_s"])
        assert report.metrics.time.duration == pytest.approx(summary["window_s"])
    as_csv = cli("export", str(run_dir), "--format", "csv", "--out", str(tmp_path / "out"))
    assert as_csv.exit_code == 0, as_csv.output
    rows = list(csv.DictReader((tmp_path / "out" / "export.csv").read_text().splitlines()))
    assert [r["level"] for r in rows] == ["c1", "c3"]
    assert float(rows[1]["output_tokens_per_s"]) == pytest.approx(summaries["c3"]["output_tokens_per_s"])
    assert rows[0]["engine"] == "endpoint" and rows[0]["model"] == "scripted"


def test_a_statistic_in_the_wrong_units_or_a_bad_format_is_refused(cli, tmp_path) -> None:
    ttft = {"units": "ms/token", "mean": 1.0}
    count = {"units": "count", "mean": 1.0}
    with pytest.raises(ValidationError, match="latency.time_to_first_token: units 'ms/token'"):
        BenchmarkReport.model_validate({
            "scenario": {"model": {"name": "m"}, "load": {"name": "x"}},
            "metrics": {"time": {"duration": 1.0}, "requests": {"total": 1, "input_length": count,
                                                               "output_length": count},
                        "latency": {"time_to_first_token": ttft}, "throughput": {"total_tokens_per_sec": 1.0}}})
    result = cli("export", str(tmp_path), "--format", "parquet")
    assert result.exit_code == 2 and "--format parquet: expected one of llmd-report, csv" in result.output
