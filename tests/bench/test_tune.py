"""`bench tune`: configurations from a grid or a file, the best and the Pareto front, and a real tune of the
reference engine that is interrupted and resumed."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bench.flows.tune_plan import TuneConfig, TuneError, parse_grids, read_configs, with_default
from bench.flows.tune_ranking import ConfigResult, accuracy_note, best, pareto_front
from common.accuracy import Accuracy
from tests.bench.test_cli import BENCH, bench

SHORT = ["--model", "dummy:tiny", "--concurrency", "2", "--duration", "1", "--input-tokens", "16",
         "--output-tokens", "8"]


def test_grids_are_every_combination_in_the_order_given() -> None:
    configs = parse_grids(["max-num-seqs=8,32", "max-num-batched-tokens=512,2048"])
    assert [c.name for c in configs] == [
        "max-num-seqs=8,max-num-batched-tokens=512", "max-num-seqs=8,max-num-batched-tokens=2048",
        "max-num-seqs=32,max-num-batched-tokens=512", "max-num-seqs=32,max-num-batched-tokens=2048"]
    assert configs[1].args == {"max-num-seqs": "8", "max-num-batched-tokens": "2048"}
    assert [c.name for c in with_default(configs[:1] + configs[:1])] == ["default", configs[0].name]
    with pytest.raises(TuneError, match="'default' is given to two different configurations"):
        with_default([TuneConfig("default", {"max-num-seqs": "8"})])


def test_a_grid_of_values_holding_commas_is_a_json_list() -> None:
    """vLLM's --speculative-config is JSON: speculation off (the default) against two draft lengths, by --grid."""
    configs = parse_grids(['speculative-config=[{"method": "ngram", "num_speculative_tokens": 2}, '
                           '{"method": "ngram", "num_speculative_tokens": 4}]', "max-num-seqs=8"])
    assert [c.args["speculative-config"] for c in configs] == ['{"method": "ngram", "num_speculative_tokens": 2}',
                                                              '{"method": "ngram", "num_speculative_tokens": 4}']
    assert all(c.args["max-num-seqs"] == "8" for c in configs)
    with pytest.raises(TuneError, match="must be a JSON list"):
        parse_grids(["speculative-config=[{method: ngram}]"])


@pytest.mark.parametrize(("grids", "message"), [
    (["max-num-seqs="], "--grid max-num-seqs=: expected KEY=V1,V2,..."),
    (["=8,16"], "--grid =8,16: expected KEY=V1,V2,..."),
    (["max-num-seqs=8", "max-num-seqs=16"], "max-num-seqs is given twice"),
])
def test_a_bad_grid_names_what_is_accepted(grids: list[str], message: str) -> None:
    with pytest.raises(TuneError, match=message.replace("...", r"\.\.\.")):
        parse_grids(grids)


def test_a_configs_file_lists_mappings_of_engine_arguments(tmp_path: Path) -> None:
    path = tmp_path / "configs.yaml"
    path.write_text("configs:\n  - {max-num-seqs: 64}\n  - {name: big-batch, max-num-seqs: 256, prefix-cache: false}\n")
    assert read_configs(path) == [TuneConfig("max-num-seqs=64", {"max-num-seqs": "64"}),
                                  TuneConfig("big-batch", {"max-num-seqs": "256", "prefix-cache": "false"})]
    path.write_text("configs:\n  - {name: ngram, speculative-config: {method: ngram, num_speculative_tokens: 4}}\n")
    assert read_configs(path) == [TuneConfig("ngram", {"speculative-config": '{"method": "ngram", '
                                                                            '"num_speculative_tokens": 4}'})]
    path.write_text("configs: []\n")
    with pytest.raises(TuneError, match="expected `configs:` a non-empty list"):
        read_configs(path)


def result(name: str, load: float | None, tokens: float | None, usd: float | None = None,
           ttft: float | None = None) -> ConfigResult:
    return ConfigResult(name, {}, "complete", name, load, tokens, usd, 1.0, ttft, tokens)


def test_the_best_is_by_the_objective_among_configurations_with_an_operating_point() -> None:
    results = [result("default", 8, 100, usd=2.0, ttft=50), result("a", 16, 180, usd=1.5, ttft=80),
               result("b", 16, 200, usd=1.2, ttft=40), result("none", None, None)]
    assert best(results, "capacity").name == "b"  # equal capacity: the one with more throughput there
    assert best(results, "cost").name == "b" and best(results, "latency").name == "b"
    assert best([result("none", None, None)], "capacity") is None


def test_accuracy_marks_a_configuration_outside_the_defaults_interval_and_a_floor_keeps_it_from_the_best() -> None:
    default = replace(result("default", 8, 100), accuracy=Accuracy(0.70, 0.65, 0.75, 300))
    faster = replace(result("int4", 16, 200), accuracy=Accuracy(0.55, 0.49, 0.61, 300))
    alike = replace(result("int8", 12, 150), accuracy=Accuracy(0.68, 0.63, 0.73, 300))
    results = [default, faster, alike]
    assert accuracy_note(faster, default) == "accuracy 55% outside the default's interval (65-75%)"
    assert accuracy_note(alike, default) is None and accuracy_note(default, default) is None
    assert accuracy_note(result("x", 1, 1), default) is None  # not graded: nothing to say
    assert best(results, "capacity").name == "int4"
    assert best(results, "capacity", min_accuracy=0.65).name == "int8"
    assert "below the required 65%: can't be the best" in accuracy_note(faster, default, 0.65)


def test_the_pareto_front_keeps_only_points_no_other_beats_on_both_axes() -> None:
    points = [("a", 10, 100), ("a", 50, 40), ("b", 20, 90), ("b", 40, 30), ("c", 30, 60), ("c", 5, 95)]
    # (5, 95) is beaten by (10, 100), (40, 30) by (50, 40); the rest trade speed for throughput.
    assert pareto_front(points) == [("a", 10, 100), ("b", 20, 90), ("c", 30, 60), ("a", 50, 40)]


def test_bad_tune_flags_are_one_line_errors(cli, tmp_path: Path) -> None:
    base = ["tune", "--out", str(tmp_path)]
    for flags, message in ((["--grid", "max-num-seqs="], "--grid max-num-seqs=: expected KEY=V1,V2"),
                           ([], "give --grid KEY=V1,V2 (repeatable) or --configs FILE"),
                           (["--grid", "max-num-seqs=8", "--objective", "speed"], "--objective speed: choose one of"),
                           (["--grid", "a=1", "--engine", "reference", "--engine", "llamacpp"], "give one"),
                           (["--configs", str(tmp_path / "none.yaml")], "none.yaml: no such file"),
                           (["--grid", "a=1", "--through-ui"], "--through-ui would add engines of its own"),
                           (["--grid", "a=1", "--engine", "openwebui"], "would add engines of their own")):
        outcome = cli(*base, *flags)
        assert outcome.exit_code == 2 and message in outcome.stderr, outcome.stderr
        assert len(outcome.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("tune-*/*-chat"))  # nothing was measured


def test_an_engine_argument_the_engine_does_not_take_fails_that_configuration_with_its_message(tmp_path) -> None:
    outcome = bench("tune", "--grid", "max-num-seqz=4", *SHORT, "--out", str(tmp_path), timeout=240)
    assert outcome.returncode == 1
    assert "max-num-seqz=4 failed" in outcome.stderr and "unrecognized arguments: --max-num-seqz 4" in outcome.stderr
    tune = json.loads(next(tmp_path.glob("tune-*/tune.json")).read_text())
    assert [c["status"].split(":")[0] for c in tune["configs"]] == ["complete", "failed"]


def test_a_tune_of_the_reference_engine_resumes_after_an_interrupt_and_marks_the_best(tmp_path: Path) -> None:
    process = subprocess.Popen([*BENCH, "tune", "--grid", "max-num-seqs=1,8", *SHORT, "--out", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    tune_json = None
    while time.monotonic() < deadline:  # interrupt while the second configuration runs
        tune_json = next(tmp_path.glob("tune-*/tune.json"), None)
        runs = list(tmp_path.glob("tune-*/*-chat/requests.jsonl"))
        if tune_json and len(runs) == 2 and runs[-1].stat().st_size:
            break
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode != 0 and "bench tune --resume" in stderr, stderr
    assert tune_json is not None
    folder = tune_json.parent
    before = json.loads(tune_json.read_text())["configs"]
    assert before[0]["status"] == "complete" and before[1]["status"] == "interrupted", before
    first_levels = (folder / before[0]["run_dir"] / "levels.jsonl").read_text()

    resumed = bench("tune", "--resume", str(folder), timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    after = json.loads(tune_json.read_text())["configs"]
    assert [c["status"] for c in after] == ["complete"] * 3
    assert after[1]["run_dir"] == before[1]["run_dir"]  # the interrupted run went on, not a new one
    assert (folder / after[0]["run_dir"] / "levels.jsonl").read_text() == first_levels  # not run again
    assert "default: complete, not run again" in resumed.stdout
    report = json.loads((folder / "tune-report.json").read_text())
    assert report["best"] in {c["name"] for c in after} and report["num_tried"] == 3
    assert report["pareto_front"] and (folder / "pareto.png").stat().st_size > 5_000
    assert f"best by capacity: {report['best']} (of 3 tried)" in resumed.stdout
    assert "Best by capacity" in (folder / "tune.md").read_text()
    decision = (folder / "report.md").read_text()  # the decision, with the best configuration and how it was chosen
    assert f"the configuration bench tune chose: {report['best']}, the best by capacity of 3 tried" in decision


def test_the_latency_objective_reads_ttft_at_the_lowest_load_whatever_the_order(tmp_path: Path) -> None:
    from bench.flows.tune_plan import TuneEntry
    from bench.flows.tune_ranking import config_result

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    levels = [{"load": load, "ttft_ms": {"p50": ttft}, "tpot_ms": {"p50": 20.0}, "output_tokens_per_s": tokens}
              for load, ttft, tokens in ((64, 900.0, 800.0), (8, 120.0, 300.0), (1, 40.0, 50.0))]
    report = {"engines": [{"operating_point": {"load": 8, "output_tokens_per_s": 300.0}, "replica_usd_per_hour": 3.6,
                           "levels": levels}], "inputs": {"assumptions": {"gpus_per_replica": 1}}}
    (run_dir / "report.json").write_text(json.dumps(report))
    got = config_result(tmp_path, TuneEntry(TuneConfig("x"), "run", "complete"))
    assert got.ttft_p50_ms_lowest_load == 40.0 and got.peak_output_tokens_per_s == 800.0
    assert got.usd_per_m_output_tokens == pytest.approx(3.6 / (300 * 3600) * 1e6)  # $3.33 per 1M output tokens
    assert got.curve[0] == (50.0, 800.0)  # 1000 / 20 ms, and 800 tokens/s on one GPU


def test_a_tune_json_naming_a_run_directory_outside_its_folder_or_malformed_is_refused(tmp_path: Path) -> None:
    """tune.json comes with a shared tune folder: a run_dir of `../..` would be read (and resumed) from outside
    it. It is refused naming the field; a file that is not a tune record is refused naming the file."""
    from bench.flows.tune_plan import TUNE_FILE, Tune, TuneError

    record = {"engine": "reference", "objective": "throughput", "created_at": "2026-12-05T00:00:00Z",
              "configs": [{"name": "default", "args": {}, "run_dir": "run-1", "status": "complete"},
                          {"name": "b", "args": {}, "run_dir": "../../elsewhere", "status": "interrupted"}]}
    (tmp_path / TUNE_FILE).write_text(json.dumps(record))
    with pytest.raises(TuneError, match=r"tune\.json configs\[1\]\.run_dir: '\.\./\.\./elsewhere' is not a plain"):
        Tune.load(tmp_path)
    record["configs"].pop()
    (tmp_path / TUNE_FILE).write_text(json.dumps(record))
    assert Tune.load(tmp_path).entries[0].run_dir == "run-1"
    (tmp_path / TUNE_FILE).write_text(json.dumps({"configs": "nope"}))
    with pytest.raises(TuneError, match="tune.json is not a tune record"):
        Tune.load(tmp_path)
