"""`bench report` and `bench cost` as a user runs them: real processes, real run directories."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = [sys.executable, "-m", "bench"]


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=60)


def test_bench_report_writes_the_three_files_and_prints_the_verdict(complete_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "decision.html"
    result = bench("report", str(complete_run), "--gpu", "h100-sxm", "--provider",
                   "together/llama-3.1-8b,groq/llama-3.1-8b", "--monthly-tokens", "3e9", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Pay per token: ")
    assert out.is_file() and out.with_suffix(".md").is_file() and (tmp_path / "decision-plots").is_dir()
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["compared_to"] == "groq/llama-3.1-8b"  # the cheaper of the two named
    assert data["inputs"]["monthly_tokens"] == 3e9


def test_bench_cost_matches_the_hand_computed_sanity_example_to_the_cent() -> None:
    # tests/costmodel/test_decide.py, example 1: $6,365.40 self-hosted, $540.00 at Together, $900.00 at
    # GPT-4o mini, which self-hosting undercuts above 363,174,333,333.33 tokens/month.
    args = ["cost", "--throughput", "2400", "--input-tokens", "256", "--output-tokens", "128", "--gpu", "h100-sxm",
            "--gpu-price", "2.99", "--provider", "together/llama-3.1-8b", "--provider", "openai/gpt-4o-mini",
            "--monthly-tokens", "3e9", "--peak-to-average", "2", "--hours", "730", "--ops-cost", "2000"]
    result = bench(*args)
    assert result.returncode == 0, result.stderr
    assert "$6,365.40" in result.stdout and "$540.00" in result.stdout and "$900.00" in result.stdout
    decision = json.loads(bench(*args, "--json").stdout)
    assert round(decision["best"]["fleet"]["monthly_usd"], 2) == 6365.40
    providers = {p["id"]: p for p in decision["best"]["providers"]}
    assert round(providers["together/llama-3.1-8b"]["monthly_usd"], 2) == 540.00
    assert round(providers["openai/gpt-4o-mini"]["crossover"]["monthly_tokens"], 2) == 363_174_333_333.33


@pytest.mark.parametrize(("args", "message"), [
    (["--gpu", "h1000"], "unknown GPU 'h1000' (did you mean h200 or h100-sxm or h100-nvl?)"),
    (["--provider", "acme/llama"], "unknown provider 'acme/llama'"),
    (["--prices", "PRICES"], "providers[0] (id 'acme/llama-3.1-8b'): usd_per_m_output: Field required"),
    (["--prices", "nope.yaml"], "--prices nope.yaml: no such file"),
    (["--scenario", "NO_GPU"], "no GPU price: give --gpu NAME"),
    (["--scenario", "BAD_TRAFFIC"], "traffic.hourly_profile: expected 24 weights"),
])
def test_bad_input_gets_one_line_naming_what_is_wrong(complete_run: Path, tmp_path: Path, args: list[str],
                                                      message: str) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("providers:\n  - {id: acme/llama-3.1-8b, host: acme, model: llama-3.1-8b, usd_per_m_input: 0.1,"
                      " source: 'https://acme.example', retrieved: 2025-05-01}\n")
    (tmp_path / "no_gpu.yaml").write_text("name: no_gpu\nslo: {ttft_ms: 2000}\npricing: {model: llama-3.1-8b}\n")
    (tmp_path / "bad_traffic.yaml").write_text("name: bad\ntraffic: {monthly_tokens: 1.0e+9, hourly_profile: [1, 2]}\n")
    swap = {"PRICES": str(prices), "NO_GPU": str(tmp_path / "no_gpu.yaml"),
            "BAD_TRAFFIC": str(tmp_path / "bad_traffic.yaml")}
    result = bench("report", str(complete_run), "--out", str(tmp_path / "r.html"), *[swap.get(a, a) for a in args])
    assert result.returncode == 2, result.stdout
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "r.html").exists()


def test_a_directory_that_is_not_a_run_is_named(tmp_path: Path) -> None:
    result = bench("report", str(tmp_path))
    assert result.returncode == 2 and f"{tmp_path}: no run.json" in result.stderr


@pytest.mark.parametrize("command", [["--help"], ["sweep", "--help"], ["report", "--help"], ["cost", "--help"]])
def test_help_imports_no_heavy_module(command: list[str]) -> None:
    """`bench --help` answers at once because it imports nothing heavy (its time: benchmarks/cli_startup.py)."""
    code = ("import sys; sys.argv = ['bench', *sys.argv[1:]]\nfrom bench.commands.cli import app\n"
            "try:\n    app()\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('torch', 'matplotlib', 'pandas', 'numpy', 'jinja2') if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code, *command], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout and result.stdout.splitlines()[-1] == "[]"


def test_a_run_through_a_ui_whose_page_was_never_checked_reports(tmp_path: Path) -> None:
    """A run.json whose UI record has no page (a run cut before the browser check) still gives every page."""
    run_dir = tmp_path / "run"
    shutil.copytree(Path(__file__).parents[1] / "bench" / "data" / "run-dummy-2levels", run_dir)
    info = json.loads((run_dir / "run.json").read_text())
    info["engine"]["details"]["ui"] = {"name": "Open WebUI", "version": "0.12.4"}
    (run_dir / "run.json").write_text(json.dumps(info))
    out = tmp_path / "decision.html"
    result = bench("report", str(run_dir), "--gpu", "h100-sxm", "--provider", "together/llama-3.1-8b",
                   "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "Open WebUI" in out.read_text() and "Open WebUI" in out.with_suffix(".md").read_text()
    assert "page was not checked" not in out.read_text()
