"""`bench cost` for people who decide: its flags reach the decision, its text says what the answer rests
on, its help reads on an 80-column terminal and a value outside a flag's range is refused by name."""

from __future__ import annotations

from typing import Any, get_args

import pytest
import typer
from typer.testing import CliRunner

import costmodel.decide
from bench.commands.cli import app
from bench.commands.report_cmd import GpuPricing
from costmodel.inputs import PricingKind

RUNNER = CliRunner()
BASE = ["cost", "--throughput", "2400", "--input-tokens", "256", "--output-tokens", "128", "--monthly-tokens", "3e9"]


def run(*args: str) -> Any:
    return RUNNER.invoke(app, list(args), env={"COLUMNS": "80"})


def test_help_fits_80_columns_and_lists_every_flag() -> None:
    result = run("cost", "--help")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
    command = typer.main.get_command(app).commands["cost"]  # type: ignore[attr-defined]
    flags = [
        opt
        for param in command.params
        if param.param_type_name == "option"
        for opt in (*param.opts, *param.secondary_opts)
    ]
    assert len(flags) > 15 and all(flag in result.output for flag in flags), flags
    for flag in ("--cache-hit-rate", "--batch-api", "--headroom", "--spare-replicas", "--gpu-pricing"):
        assert flag in flags


def test_the_pricing_kinds_offered_are_the_cost_models() -> None:
    assert [kind.value for kind in GpuPricing] == list(get_args(PricingKind))


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--cache-hit-rate", "1.5"),
        ("--headroom", "0"),
        ("--headroom", "1.2"),
        ("--gpus-per-replica", "65"),
        ("--hours", "800"),
        ("--spare-replicas", "-1"),
        ("--gpu-pricing", "monthly"),
    ],
)
def test_a_value_outside_a_flags_range_is_refused_with_the_flags_name(flag: str, value: str) -> None:
    result = run(*BASE, flag, value)
    assert result.exit_code == 2 and f"'{flag}'" in result.output, result.output


def test_the_flags_override_the_scenarios_traffic_and_pricing(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    real = costmodel.decide.decide_given

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen["args"] = args
        return real(*args, **kwargs)

    monkeypatch.setattr(costmodel.decide, "decide_given", spy)
    result = run(
        *BASE,
        "--cache-hit-rate",
        "0.4",
        "--batch-api",
        "--headroom",
        "0.6",
        "--spare-replicas",
        "0",
        "--gpu",
        "h100-sxm",
        "--gpu-pricing",
        "reserved",
    )
    assert result.exit_code == 0, result.output
    throughput, isl, osl, traffic, pricing = seen["args"][:5]
    assert (throughput, isl, osl) == (2400, 256, 128)
    assert (traffic.cache_hit_rate, traffic.uses_batch_api, traffic.monthly_tokens) == (0.4, True, 3e9)
    assert (pricing.headroom, pricing.spare_replicas, pricing.gpu, pricing.gpu_pricing) == (
        0.6,
        0,
        "h100-sxm",
        "reserved",
    )
    assert pricing.references == ["openai/gpt-5-mini", "anthropic/claude-haiku-4.5"]  # the rest: the scenario's


def test_the_text_states_lengths_headroom_peak_hours_and_that_people_are_not_counted() -> None:
    result = run(*BASE, "--gpu", "h100-sxm", "--ops-cost", "0", "--peak-to-average", "2", "--hours", "730")
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())  # rich may wrap long lines
    assert "256 input + 128 output tokens on average (ISL/OSL)" in out
    assert "planned at 80% of its capacity (20% headroom), 1 spare replica(s)" in out
    assert "peak-to-average 2 (given), 730 h/month of operation" in out
    assert "operations: $0.00/month: people's time to run the fleet is not counted" in out
    assert "warning: operations cost is $0/month" in out


def test_small_prices_keep_their_significant_digits() -> None:
    # deepinfra/llama-3.1-8b at $0.02 in / $0.04 out: (256 * 0.02 + 128 * 0.04) / 384 = $0.02667 per 1M tokens
    result = run(*BASE, "--gpu", "h100-sxm", "--provider", "deepinfra/llama-3.1-8b")
    assert result.exit_code == 0, result.output
    assert "$0.0267" in result.output and "$0.03 " not in result.output


def test_a_reserved_term_bills_all_month_and_serverless_the_hours_used() -> None:
    reserved = run(*BASE, "--gpu", "h100-sxm", "--gpu-pricing", "reserved", "--hours", "260")
    assert reserved.exit_code == 0, reserved.output
    out = " ".join(reserved.output.split())
    assert "GPU: together/h100-sxm/reserved ($3.19/GPU-h, reserved for 91-180 days), billed 730 h/month" in out
    serverless = run(*BASE, "--gpu", "h100-sxm", "--gpu-pricing", "serverless", "--hours", "260")
    assert serverless.exit_code == 0, serverless.output
    out = " ".join(serverless.output.split())
    assert "GPU: modal/h100-sxm/serverless ($3.95/GPU-h), billed 260 h/month" in out
    assert "waits a cold start" in out


def test_the_batch_api_without_a_discount_in_the_rows_is_said() -> None:
    result = run(*BASE, "--gpu", "h100-sxm", "--batch-api")
    assert result.exit_code == 0, result.output
    assert "no compared price row has a batch discount" in " ".join(result.output.split())


def test_a_crossover_below_the_traffic_never_reads_as_if_self_hosting_won() -> None:
    """R* = 2,800 / 250 = 11.2 req/s; N = 1.4e11 / 1,250 = 112 M requests; peak 3 x 112e6 / 2,628,000 = 127.85
    req/s over 0.8 x 11.2 = 8.96 a replica -> 15 serving + 1 spare = 16 GPUs x $3 x 730 = $35,040. gpt-4o-mini:
    (1,000 x 0.15 + 250 x 0.60) / 1e6 = $0.0003 a request x 112 M = $33,600. The fluid crossover lies at 137 B
    (below the traffic), the sawtooth's last gap ends at 256 B: at 140 B self-hosting costs 35,040 / 33,600 - 1
    = 4 % more."""
    result = run("cost", "--throughput", "2800", "--input-tokens", "1000", "--output-tokens", "250", "--gpu-price", "3",
                 "--provider", "openai/gpt-4o-mini", "--monthly-tokens", "1.4e11", "--peak-to-average", "3",
                 "--ops-cost", "0")
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "Pay per token: $33,600" in out and "$35,040" in out
    assert ("self-hosting is first cheaper at 137 B tokens/month (0.98x this traffic) and cheaper for good above "
            "256 B (whole replicas make its cost a sawtooth); at this traffic (140 B) it costs 4% more than "
            "openai/gpt-4o-mini") in out
    # $3 / (2,800 x 3,600) x 1e6 = $0.298 per 1M output tokens at the operating point
    assert "Self-hosted at the operating point: $0.298 per 1M output tokens" in out
    assert "What moves the monthly saving most: Throughput at the SLO (" in out
    # break-even utilization C_req / a: (3 / (3,600 x 11.2)) / 0.0003 = 0.0000744 / 0.0003 = 25 %
    row = next(line for line in result.output.splitlines() if line.startswith("│ openai/gpt-4o-mini "))
    assert row.rstrip(" │").endswith("25%")


def test_a_gpu_price_picked_by_name_says_which_row_and_how() -> None:
    result = run(*BASE, "--gpu", "h100-sxm")
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "the median of" in out and "dated on-demand rows for h100-sxm under a year old" in out
    named = run(*BASE, "--gpu", "together/h100-sxm/on-demand")
    assert "the median of" not in " ".join(named.output.split())  # a row named by its id: nothing to explain


def test_the_help_names_only_the_gpus_the_catalog_prices_today_kind_by_kind() -> None:
    from datetime import date

    from costmodel.prices import load_catalog

    result = run("cost", "--help")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.replace("│", " ").split())  # the help column's lines, without the panel's edges
    kinds = load_catalog().as_of(date.today()).priceable()
    for kind, names in kinds.items():
        assert f"{kind}: {', '.join(names)}" in text
    # l40s has a serverless row only: an on-demand --gpu l40s is not offered as if it were priced
    assert "l40s" not in kinds["on-demand"] and "l40s" in kinds["serverless"]
    # a row ages out of the defaults after a year: on 2027-07-01 the May and June 2026 rows no longer count
    later = load_catalog().as_of(date(2027, 7, 1)).priceable()
    assert "rtx-4090" not in later["on-demand"] and "l40s" not in later.get("serverless", [])


# An owned 8-GPU server at $240,000 over 4 years (straight-line: $5,000 a month), $1,132 hosting, 8 x 700 W at
# PUE 1.25 for 730 h = 5,110 kWh at $0.10 = $511: $6,643 a month, over 8 x 730 GPU-hours = $1.1375 per GPU-hour;
# at 2,800 output tokens/s a 1M output tokens take 357.14 s: $1.1375 x 1e6 / (2,800 x 3,600) = $0.112847;
# against $3/GPU-h rented, 1.1375 / 3 = 0.379x.
OWNED = ["--owned", "server_usd=240000", "--owned", "amortization_years=4", "--owned", "usd_per_kwh=0.10",
         "--owned", "power_w_per_gpu=700", "--owned", "pue=1.25", "--owned", "hosting_usd_per_server_month=1132"]
OWNED_BASE = ["cost", "--throughput", "2800", "--input-tokens", "1000", "--output-tokens", "250", "--gpu-price", "3",
              "--provider", "deepinfra/llama-3.1-8b", "--monthly-tokens", "1.4e11", "--ops-cost", "0"]


def test_owned_hardware_from_flags_is_costed_per_gpu_hour_and_per_output_token_with_its_defaults_said() -> None:
    import json

    result = run(*OWNED_BASE, *OWNED, "--json")
    assert result.exit_code == 0, result.output
    owned = json.loads(result.output)["owned"]
    assert owned["usd_per_gpu_hour"] == pytest.approx(1.1375, abs=1e-9)
    assert owned["usd_per_m_output_tokens"] == pytest.approx(0.112847, abs=5e-7)
    assert owned["to_rent_ratio"] == pytest.approx(0.379167, abs=5e-7)
    text = " ".join(run(*OWNED_BASE, *OWNED).output.split())
    assert "$1.1375 per GPU-hour" in text and "($0.1128 per 1M output tokens), 0.379x the rented GPU-hour" in text
    assert "owned: cost of capital 0.0% a year (cost_of_capital: the purchase then is an annuity); maintenance " \
           "0.0% of the price a year (maintenance_share_per_year)" in text
    assert "owned: power: 700 W per GPU, as given (power_w_per_gpu), billed for the 730 h/month operated" in text


@pytest.mark.parametrize(("extra", "message"), [
    ("colour=red", "--owned colour: unknown field; known: server_usd, gpus_per_server"),
    ("amortization_years=40", "owned.amortization_years: Input should be less than or equal to 15"),
    ("server_usd", "--owned server_usd: expected KEY=VALUE, e.g. --owned server_usd=250000"),
    ("usd_per_kwh=cheap", "owned.usd_per_kwh: Input should be a valid number"),
])
def test_a_bad_owned_flag_is_refused_naming_the_field(extra: str, message: str) -> None:
    result = run(*OWNED_BASE, *OWNED, "--owned", extra)
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


def test_a_host_serving_another_precision_than_the_self_hosted_model_is_named() -> None:
    # deepinfra's Turbo endpoint is listed as fp8; coreweave's as bf16
    fp8 = " ".join(run(*OWNED_BASE, "--precision", "bfloat16").output.split())
    assert "deepinfra/llama-3.1-8b serves fp8 weights, the self-hosted model runs bf16: not the same product" in fp8
    unstated = " ".join(run(*OWNED_BASE).output.split())
    assert "deepinfra/llama-3.1-8b serves fp8 weights; the self-hosted precision is not stated" in unstated
    coreweave = [("coreweave/llama-3.1-8b" if arg == "deepinfra/llama-3.1-8b" else arg) for arg in OWNED_BASE]
    same = run(*coreweave, "--precision", "bf16")
    assert same.exit_code == 0 and "serves" not in same.output, same.output


@pytest.mark.parametrize("columns", [None, "130"])
def test_piped_text_is_as_wide_as_columns_says_else_100_and_no_table_cuts_an_id(columns: str | None) -> None:
    import os
    import subprocess

    from tests.bench.test_cli import BENCH

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | ({"COLUMNS": columns} if columns else {})
    result = subprocess.run([*BENCH, *OWNED_BASE, "--provider", "anthropic/claude-haiku-4.5"], capture_output=True,
                            text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    text = [line for line in lines if line not in table]
    width = int(columns or 100)
    assert max(map(len, text)) == width or max(map(len, text)) == width - 1  # wrapped at the width
    assert len([line for line in text if line.startswith("  - ")]) >= 4
    assert "…" not in result.stdout  # a table folds an id over two lines, never cuts it
    if columns:
        assert max(map(len, table)) <= width
    else:  # piped without COLUMNS: a table at its own width, one line a row
        assert max(map(len, table)) > width and any("│ anthropic/claude-haiku-4.5 " in row for row in table)
