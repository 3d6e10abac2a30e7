"""The report rendered from real run directories: what it says, and that every figure traces to the runs."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
from datetime import date
from pathlib import Path

import matplotlib.image
import pytest

from bench.flows.report import ReportError, render_report, render_run_report, settings_from_run
from bench.inputs.scenario import DecisionSettings, load_scenario
from bench.run.rundir import summarize_run
from reports.plots import PLOTS

TODAY = date(2026, 12, 1)


def settings_for(name: str = "chat", **changes: object) -> DecisionSettings:
    return load_scenario(name).decision_settings().model_copy(update=changes)


def images_of(html: str) -> dict[str, bytes]:
    found = re.findall(r'<figure id="plot-([a-z_]+)">\s*<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    return {name: base64.b64decode(data) for name, data in found}


def test_report_of_a_real_sweep_puts_the_verdict_first_and_every_figure_in_json(complete_run: Path,
                                                                                 tmp_path: Path) -> None:
    files = render_report([complete_run], tmp_path / "report.html", today=TODAY).files
    html = files.html.read_text()
    assert html.index('id="verdict"') < html.index('id="side-by-side"') < html.index("<h2>Plots</h2>") \
        < html.index("<h2>Method</h2>") < html.index("<h2>Caveats</h2>") < html.index("<h2>Provenance</h2>")
    data = json.loads(files.json.read_text())
    assert data["verdict"]["answer"] == "pay-per-token"  # an 8B model at 3 B tokens a month: no contest
    assert data["verdict"]["headline"] in html and data["verdict"]["headline"] in files.markdown.read_text()
    # Every level's cost is the formula applied to the run's own summary: P / (3600 * X_out / OSL).
    price = data["inputs"]["assumptions"]["gpu_usd_per_hour"]
    for level, summary in zip(data["engines"][0]["levels"], summarize_run(complete_run), strict=True):
        r = summary.throughput.output_tokens_per_s / summary.tokens.mean_output_tokens
        assert level["cost"]["usd_per_request"] == pytest.approx(price / (3600 * r))
        per_m_output = price * 1e6 / (3600 * summary.throughput.output_tokens_per_s)
        assert level["cost"]["usd_per_m_output_tokens"] == pytest.approx(per_m_output)
    # No GPU was read on this machine, and the workload is not agent sessions
    assert {p["name"] for p in data["plots"]} == set(PLOTS) - {"power", "agent_sessions", "session_lane"}
    assert all((tmp_path / p["file"]).is_file() for p in data["plots"])
    assert {"llama-3.1-8b", "together/h100-sxm/on-demand"} <= set(re.findall(r"[a-z0-9./-]+", html))
    assert "older than 90 days" in html  # the shipped prices are dated, and they are old


def test_the_html_is_self_contained_and_every_plot_is_a_non_blank_png(complete_run: Path, tmp_path: Path) -> None:
    html = render_report([complete_run], tmp_path / "r.html", today=TODAY).files.html.read_text()
    assert not re.search(r'(src|href)="(?!data:)', html), "nothing may load from outside the file"
    assert "<script" not in html and "<link" not in html
    images = images_of(html)
    # Power drawn only where GPUs were read (tests/gpu); agent sessions only for them (tests/e2e/test_agent_sessions)
    assert set(images) == set(PLOTS) - {"power", "agent_sessions", "session_lane"}
    for name, png in images.items():
        pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
        assert pixels.shape[0] > 200 and pixels.shape[1] > 400, name
        assert pixels[..., :3].std() > 0.05, f"{name} looks blank"


def test_two_engines_are_compared_and_the_cheaper_one_decides(complete_run: Path, slower_run: Path,
                                                              tmp_path: Path) -> None:
    files = render_report([slower_run, complete_run], tmp_path / "both.html", settings=settings_for(),
                          today=TODAY).files
    data = files.data
    labels = [e["engine"] for e in data["engines"]]
    assert len(set(labels)) == 2 and all(label.startswith("endpoint (") for label in labels)  # same name: run ids
    slower, faster = data["engines"]
    assert data["best_engine"] == faster["engine"]
    assert faster["operating_point"]["output_tokens_per_s"] > slower["operating_point"]["output_tokens_per_s"]
    assert (tmp_path / "both-plots" / "throughput.png").is_file()


def test_an_interrupted_sweep_reports_what_exists_and_says_what_is_missing(interrupted_run: Path,
                                                                           tmp_path: Path) -> None:
    files = render_report([interrupted_run], tmp_path / "report.html", today=TODAY).files
    warnings = " ".join(files.data["warnings"])
    assert "did not complete (status: interrupted)" in warnings
    assert "planned but never measured: c8" in warnings and "cut short before its end: c2" in warnings
    assert [lv["label"] for lv in files.data["engines"][0]["levels"]] == ["c2"]
    assert "missing c8" in files.html.read_text()


def test_a_scenario_without_traffic_still_reports_costs_and_says_what_to_add(complete_run: Path,
                                                                             tmp_path: Path) -> None:
    files = render_report([complete_run], tmp_path / "r.html", settings=settings_for(traffic=None), today=TODAY).files
    verdict = files.data["verdict"]
    assert verdict["answer"] in {"pay-per-token", "depends-on-volume"}
    assert any("No traffic volume given: set traffic.monthly_tokens" in line for line in verdict["lines"])
    assert files.data["engines"][0]["fleet"] is None
    assert files.data["engines"][0]["levels"][0]["cost"]["usd_per_request"] > 0
    assert "sensitivity" not in {p["name"] for p in files.data["plots"]}  # no volume: no monthly saving to vary


def test_when_no_level_meets_the_slo_the_report_says_so_and_still_shows_the_levels(complete_run: Path,
                                                                                  tmp_path: Path) -> None:
    strict = settings_for().model_copy(update={"slo": settings_for().slo.model_copy(update={"ttft_ms": 1.0})})
    files = render_report([complete_run], tmp_path / "r.html", settings=strict, today=TODAY).files
    assert files.data["verdict"]["answer"] == "undecided"
    assert "no measured load met the latency targets" in files.data["verdict"]["headline"]
    assert all(not lv["meets_slo"] for lv in files.data["engines"][0]["levels"])
    assert {"throughput", "latency", "cost_per_token"} <= {p["name"] for p in files.data["plots"]}


def test_a_requirement_makes_self_hosting_required_and_the_cost_still_sizes_it(complete_run: Path,
                                                                               tmp_path: Path) -> None:
    base = settings_for()
    required = base.model_copy(update={"requirements": base.requirements.model_copy(
        update={"data_must_stay_on_premises": True, "reason": "customer contracts"})})
    files = render_report([complete_run], tmp_path / "r.html", settings=required, today=TODAY).files
    assert files.data["verdict"]["answer"] == "self-host-required"
    assert "customer contracts" in files.data["verdict"]["headline"]
    assert files.data["engines"][0]["fleet"]["gpus"] >= 2


def test_the_run_report_uses_the_scenario_the_run_was_measured_with(complete_run: Path, tmp_path: Path) -> None:
    run = tmp_path / complete_run.name
    shutil.copytree(complete_run, run)
    assert settings_from_run(run).pricing.gpu == "h100-sxm"
    path = render_run_report(run)
    assert path == run / "report.html" and (run / "report.json").is_file() and (run / "plots").is_dir()
    md = (run / "report.md").read_text()
    assert "![Monthly cost vs monthly volume, with the crossover](plots/monthly_cost.png)" in md


def test_a_run_that_measured_nothing_has_no_report_and_a_missing_directory_is_named(complete_run: Path,
                                                                                   tmp_path: Path) -> None:
    empty = tmp_path / "empty-run"
    empty.mkdir()
    shutil.copy(complete_run / "run.json", empty / "run.json")
    assert render_run_report(empty) is None
    with pytest.raises(ReportError, match="nope: no such directory"):
        render_report([tmp_path / "nope"], today=TODAY)
    # next to a good run, the empty one is skipped with a note rather than sinking the report
    files = render_report([empty, complete_run], tmp_path / "r.html", today=TODAY).files
    assert any("skipped:" in w and "no requests.jsonl" in w for w in files.data["warnings"])
