"""A shared measuring flag that a command would set itself is refused, naming the flag and why, before anything
starts: it is never taken and then overwritten without a word."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.test_cli import only_run_dir
from tests.servers import ScriptedServer


def _endpoint(server: ScriptedServer, out: Path) -> list[str]:
    return ["--engine", "endpoint", "--base-url", server.base_url, "--model", "scripted", "--out", str(out)]


@pytest.mark.parametrize(("flag", "value", "why"), [
    ("--duration", "5", "--duration: bench quality grades every item of the eval once; it takes no duration"),
    ("--requests", "3", "--requests: bench quality grades every item of the eval once; it sends one request per "
                        "item"),
    ("--warmup", "2", "--warmup: bench quality grades every item of the eval once and sends no warm-up"),
    ("--repeats", "2", "--repeats: bench quality grades every item of the eval once, greedy"),
    ("--resume", "runs/x", "--resume: a quality run is asked again whole"),
])
def test_quality_refuses_the_bounds_it_sets_itself(scripted, tmp_path, cli, flag: str, value: str, why: str) -> None:
    result = cli("quality", *_endpoint(scripted, tmp_path / "runs"), flag, value)
    assert result.exit_code == 2
    assert why in " ".join(result.output.split())
    assert not (tmp_path / "runs").exists()  # no run directory: nothing was launched or asked
    assert scripted.models() == []  # not one request reached the server


def test_quality_without_those_flags_still_asks_every_item_once(scripted, tmp_path, cli) -> None:
    scripted.set_script(ttft_ms=1, itl_ms=1)
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text("".join(f'{{"prompt": "What is {n} + 1?", "answer": "{n + 1}", "grader": "exact"}}\n'
                                 for n in range(3)))
    result = cli("quality", *_endpoint(scripted, tmp_path / "runs"), "--eval", str(eval_file))
    assert result.exit_code == 0, result.output
    assert len(scripted.models()) == 3  # one request per item: no warm-up, no count or duration of its own
    assert (only_run_dir(tmp_path / "runs") / "quality.json").is_file()


def test_tune_and_capacity_refuse_the_flags_they_have_no_use_for(tmp_path, cli) -> None:
    for args, why in [(["tune", "--grid", "max-num-seqs=2,4", "--engine-file", "a.yaml"],
                       "--engine-file: a tune tries the configurations of one engine given by --engine KIND"),
                      (["capacity", "--adapters", "a,b", "--adapter-counts", "1,2"],
                       "--adapter-counts: a sweep's dimension: a capacity search runs one adapter mix")]:
        result = cli(*args, "--out", str(tmp_path / "runs"))
        assert result.exit_code == 2, result.output
        assert why in " ".join(result.output.split())
    assert not (tmp_path / "runs").exists()


def test_tune_refuses_no_report_since_it_ranks_configurations_by_their_reports(tmp_path, cli) -> None:
    result = cli("tune", "--grid", "max-num-seqs=2,4", "--no-report", "--out", str(tmp_path / "runs"))
    assert result.exit_code == 2
    assert ("--no-report: bench tune ranks its configurations by each one's run report (report.json), so it always "
            "writes them") in " ".join(result.output.split())
    assert not (tmp_path / "runs").exists()  # no tune folder: nothing was launched
