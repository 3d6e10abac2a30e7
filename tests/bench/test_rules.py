"""Rule-locked presets: the shipped MLPerf scenarios hold a run to MLPerf Inference's LLM rules for Llama-3.1-8B,
and a run that departs from them says so on its first line and in its report, naming each departure."""

from __future__ import annotations

from pathlib import Path

from bench.inputs.overrides import build_scenario
from bench.inputs.rules import departures, first_line
from bench.inputs.scenario import load_scenario
from loadgen.workload import DatasetSettings
from tests.bench.test_cli import bench, only_run_dir, sweep_args


def test_the_presets_carry_mlperfs_limits() -> None:
    server, interactive = load_scenario("mlperf-server"), load_scenario("mlperf-interactive")
    assert (server.slo.ttft_ms, server.slo.tpot_ms) == (2000, 100)
    assert (interactive.slo.ttft_ms, interactive.slo.tpot_ms) == (500, 30)
    for preset in (server, interactive):
        assert preset.rules is not None and preset.rules.min_duration_s == 600 and preset.rules.percentile == 99
        assert preset.load.duration_s == 600 and preset.load.rates and not preset.load.concurrency
        assert preset.pricing.slo_attainment_target == 0.99
        assert departures(preset) == ["synthetic prompts, not CNN/DailyMail (MLPerf's llama3.1-8b queries)"]


def test_each_departure_is_named_and_a_run_that_keeps_the_rules_says_so() -> None:
    preset = load_scenario("mlperf-server")
    with_data = preset.model_copy(update={"workload": preset.workload.model_copy(
        update={"dataset": DatasetSettings(path="cnn_eval.jsonl")})})
    assert departures(with_data) == []
    assert (first_line(with_data) or "").startswith("held to MLPerf Inference (Llama-3.1-8B, Server)'s rules: 600 s")
    short = with_data.model_copy(update={"load": with_data.load.model_copy(update={"duration_s": 60.0})})
    assert first_line(short) == ("not comparable to MLPerf: duration 60 s < 600 s (the rules of MLPerf Inference "
                                 "(Llama-3.1-8B, Server))")
    closed = with_data.model_copy(update={"load": with_data.load.model_copy(
        update={"concurrency": [8], "burstiness": 0.5})})
    assert departures(closed) == ["closed-loop users (--concurrency), not Poisson arrivals (--rate)",
                                  "burstiness 0.5, not 1 (Poisson)"]
    looser = with_data.model_copy(update={"slo": with_data.slo.model_copy(update={"tpot_ms": 200.0}),
                                          "pricing": with_data.pricing.model_copy(
                                              update={"slo_attainment_target": 0.95})})
    assert departures(looser) == ["SLO TTFT 2,000 ms, TPOT 200 ms, not 2,000 ms and 100 ms",
                                  "SLO judged at 95% of requests, not 99 % (p99)"]
    assert first_line(build_scenario("chat")) is None


def test_a_sweep_under_rules_says_where_it_departs_on_its_first_line_and_in_its_report(scripted, tmp_path: Path):
    scripted.set_script(ttft_ms=10, itl_ms=1)
    result = bench(*sweep_args(scripted, tmp_path, "--scenario", "mlperf-server", "--rate", "20", "--duration", "2",
                               "--output-tokens", "8", "--input-tokens", "32"), timeout=120)
    assert result.returncode == 0, result.stderr
    first = result.stdout.strip().splitlines()[0]
    assert first.startswith("not comparable to MLPerf: duration 2 s < 600 s; synthetic prompts"), result.stdout
    report = (only_run_dir(tmp_path) / "report.md").read_text().splitlines()  # escaped for Markdown, as every value
    assert report[0].startswith("# ") and report[2].startswith("**not comparable to MLPerf: duration 2 s &lt; 600 s")
    page = (only_run_dir(tmp_path) / "report.html").read_text()
    assert page.index("not comparable to MLPerf: duration 2 s &lt; 600 s") < page.index("Generated")
