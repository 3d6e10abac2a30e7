"""A sweep's engines placed side by side (`bench sweep --engine-file A --engine-file B --cluster`), without Ray:
each engine measured by the real node process on a stand-in node (tests/bench/placer_stand_in.py), its run
directory shipped back into the runs folder. Ray's own placer is checked under `pytest -m ray`
(tests/e2e/test_ray_tune.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.commands.cli import app
from bench.flows import measure
from bench.flows.placed import for_nodes
from bench.flows.sweep_cluster import (
    hardware_note,
    resume_works,
    run_works,
    sweep_settings,
    sweep_settings_back,
    sweep_works,
)
from bench.inputs.measure_options import MeasureFlags
from bench.inputs.options import LoadOverrides
from bench.run.runinfo import GpuRecord, HostRecord
from tests.bench.placer_stand_in import LocalPlacer
from tests.bench.test_tune_cluster import Watch, _handle, _marked_by
from tests.servers import is_running

LEVELS = LoadOverrides(concurrency="1,2")


def _engine_file(folder: Path, name: str, max_num_seqs: int) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(f"engine: reference\nname: {name}\nmodel: dummy:tiny\nargs:\n  max-num-seqs: {max_num_seqs}\n")
    return path


def _check_complete(run_dir: Path, engine: str) -> None:
    """A run directory as a sweep on this machine leaves it: complete, its engine's, every record of each level."""
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete" and run["engine_spec"]["name"] == engine
    levels = [json.loads(line) for line in (run_dir / "levels.jsonl").read_text().splitlines()]
    assert [level["level"] for level in levels] == ["c1", "c2"]
    records = (run_dir / "requests.jsonl").read_text().splitlines()
    assert len(records) == sum(level["num_records"] + level["num_warmup"] for level in levels) > 0
    assert all(json.loads(line)["level"] for line in records)  # no record cut in two by shipping


def test_two_engines_on_stand_in_nodes_come_back_as_one_sweep_and_a_lost_one_resumes_from_its_shipped_level(
        tmp_path: Path) -> None:
    out = tmp_path / "runs"
    flags = MeasureFlags(engine_file=[_engine_file(tmp_path, "one-seq", 1), _engine_file(tmp_path, "four-seqs", 4)],
                         duration=1.0, input_tokens="16", output_tokens="8", out=out)
    placer = LocalPlacer(slots=2, root=tmp_path / "nodes")

    def lose_mid_run(line: str) -> None:  # its first level shipped, its second under way
        if line == "one-seq: level c2 started":
            placer.lose(_handle(placer, "one-seq"))

    watch = Watch(lose_mid_run)
    jobs = measure.fresh_jobs(flags, LEVELS)
    outcome = run_works(sweep_works(jobs, flags, LEVELS), placer, watch)

    assert sorted(name for name, _ in placer.placements) == ["four-seqs", "one-seq"] and placer.most_at_once == 2
    assert [result.run_dir.parent for result in outcome.results] == [out]
    _check_complete(outcome.results[0].run_dir, "four-seqs")
    assert outcome.exit_code == 1 and [engine for engine, _ in outcome.failures] == ["one-seq"]
    lost = Path(outcome.failures[0][1].split("go on with --resume ")[1].rstrip(")"))
    assert lost.parent == out and "interrupted" in outcome.failures[0][1]
    shipped_level = (lost / "levels.jsonl").read_text()
    assert [json.loads(line)["level"] for line in shipped_level.splitlines()] == ["c1"]
    assert any(line.startswith("one-seq: running on stand-in-") for line in watch.lines)

    again = LocalPlacer(slots=2, root=tmp_path / "nodes-again")
    works, complete = resume_works(MeasureFlags(resume=[lost, outcome.results[0].run_dir], out=out), [], watch.say)
    assert complete == [outcome.results[0].run_dir] and [work.name for work in works] == ["one-seq"]
    resumed = run_works(works, again, Watch())
    assert resumed.exit_code == 0 and [result.run_dir for result in resumed.results] == [lost]
    assert (lost / "levels.jsonl").read_text().startswith(shipped_level)  # the shipped level kept as it was
    _check_complete(lost, "one-seq")
    reports = measure.write_reports([outcome.results[0].run_dir, lost], out)
    assert reports.problem is None and reports.comparison is not None and len(reports.written) == 2
    assert not list((tmp_path / "nodes").iterdir()) and not list((tmp_path / "nodes-again").iterdir())
    nodes = [h.run.process.pid for h in placer.handles + again.handles if h.run is not None]
    assert not any(is_running(pid) for pid in nodes) and _marked_by(nodes) == []  # the lost node's engine included


def test_what_each_engine_asks_of_a_node_without_a_cluster_is_refused_naming_the_flags(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["sweep", "--gpus-per-engine", "1", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--gpus-per-engine and --cpus-per-engine say what each engine asks of a cluster's node; give --cluster" \
        in " ".join(result.output.split())
    assert not list(tmp_path.iterdir())


def test_client_workers_on_ray_with_the_cluster_are_refused_naming_both_flags(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["sweep", "--ray", "auto", "--cluster", "auto", "--out", str(tmp_path)])
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert "--ray auto --cluster auto: with --cluster each engine's load comes from its own node; drop --ray" in said


def test_the_files_flags_name_reach_a_node_as_absolute_paths_of_the_right_type(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for folder in ("adapters", "peft-a"):
        (tmp_path / folder).mkdir()
    flags = MeasureFlags(adapters_dir=Path("adapters"), lora=["a=peft-a"], engine_file=[Path("one.yaml")],
                         out=Path("runs"))
    shipped = json.loads(json.dumps(for_nodes(sweep_settings(flags, LoadOverrides(concurrency="1,8")))))
    back, levels = sweep_settings_back(shipped, Path("/staging"))
    assert back.adapters_dir == tmp_path / "adapters" and isinstance(back.adapters_dir, Path)
    assert back.lora == [f"a={tmp_path / 'peft-a'}"] and back.engine_file == [tmp_path / "one.yaml"]
    assert back.out == Path("/staging") and levels.concurrency == "1,8"


def test_engines_measured_on_different_hardware_are_compared_with_a_warning_naming_each_node() -> None:
    xeon = HostRecord(hostname="a", cpu_model="Xeon", cpus_usable=16, gpus=[GpuRecord(name="H100", driver="570")])
    epyc = HostRecord(hostname="b", cpu_model="EPYC", cpus_usable=32, gpus=[GpuRecord(name="H100", driver="570")])
    alike = [("vllm", "node-a", xeon), ("sglang", "node-b", replace(xeon, hostname="c"))]
    assert hardware_note([*alike, ("endpoint", None, None)]) is None  # the host's name is not its hardware
    assert hardware_note([*alike, ("trt", "node-d", epyc)]) == (
        "the engines were measured on different hardware, so compare them with care: vllm (node-a), sglang (node-b) "
        "on Xeon x16, 1x H100 (driver 570); trt (node-d) on EPYC x32, 1x H100 (driver 570)")
