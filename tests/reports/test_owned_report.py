"""A report for an owned 8-GPU server beside renting and two providers (the shipped `owned` scenario)."""

from __future__ import annotations

import json
from datetime import date
from importlib import resources
from pathlib import Path

import pytest

from bench.flows.report import render_report
from bench.inputs.scenario import ScenarioError, load_scenario, parse_scenario

TODAY = date(2026, 12, 1)


def test_an_owned_server_is_reported_beside_renting_and_two_providers(complete_run: Path, tmp_path: Path) -> None:
    settings = load_scenario("owned").decision_settings()
    files = render_report([complete_run], tmp_path / "report.html", settings=settings, today=TODAY).files
    data = json.loads(files.json.read_text())
    owned = data["owned"]
    # 250,000 x 0.9 / 48 = $4,687.50; (8 x 700 + 1,200) W x 1.3 x 730 h = 6,453.2 kWh x $0.12 = $774.38;
    # + $1,500 hosting = $6,961.88 (no GPU was read here: the H100's board power)
    assert round(owned["server_total_usd"], 2) == 6961.88
    assert "board power" in owned["server"]["power_source"]
    point = data["engines"][0]["operating_point"]
    assert owned["joules_per_output_token"] == pytest.approx(700 / point["output_tokens_per_s"])  # 1 GPU a replica
    assert owned["fleet"]["servers"] >= 1 and owned["rent_monthly_usd"] > 0 and owned["provider_monthly_usd"] > 0
    assert owned["provider_id"] in ("together/llama-3.1-8b", "fireworks/llama-3.1-8b")
    assert [row["kind"] for row in data["side_by_side"]].count("owned") == 1
    assert sum(row["kind"] == "provider" for row in data["side_by_side"]) == 2
    assert {row["name"] for row in owned["sensitivity"]} == {"Electricity price", "Amortization",
                                                              "Utilization (traffic on the same fleet)"}
    markdown = files.markdown.read_text()
    assert "## Own, rent or pay per token" in markdown and "pays back" in markdown
    assert any(line.startswith("Owned: a server costs $6,962/month") for line in data["verdict"]["lines"])


@pytest.mark.parametrize(("field", "value"), [("amortization_years", 0), ("usd_per_kwh", -0.1), ("pue", 0.8)])
def test_bad_owned_figures_in_a_scenario_are_one_line_errors_naming_the_field(field: str, value: float) -> None:
    text = (resources.files("scenarios") / "owned.yaml").read_text()
    assert f"    {field}: " in text
    text = text.replace(f"    {field}: ", f"    {field}: {value}  # was ", 1)
    with pytest.raises(ScenarioError) as error:
        parse_scenario(text, "owned.yaml")
    message = str(error.value)
    assert f"pricing.owned.{field}" in message and "\n" not in message
