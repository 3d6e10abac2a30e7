"""A run directory an earlier version wrote still reads and reports: `data/run-eab334d` was written by the
toolkit at commit eab334d (before run.json was read into typed records, before levels recorded the machine),
against the scripted server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench.flows.report import render_report
from bench.inputs.scenario import DecisionSettings
from bench.run.rundir import read_run, write_summaries

OLD_RUN = Path(__file__).parent / "data" / "run-eab334d"
SETTINGS = DecisionSettings.model_validate({"pricing": {"gpu": "h100-sxm", "providers": ["together/llama-3.1-8b"]},
                                            "traffic": {"monthly_tokens": 3e9}})


def copy_of_old_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / OLD_RUN.name
    shutil.copytree(OLD_RUN, run_dir)
    return run_dir


def test_an_old_run_reads_whole_and_summarizes_to_the_figures_it_wrote(tmp_path: Path) -> None:
    run_dir = copy_of_old_run(tmp_path)
    written = json.loads((run_dir / "summary.json").read_text())
    run = read_run(run_dir)
    assert run.info.unread == [] and run.info.engine.name == "endpoint" and run.finished == ("c1", "c2")
    write_summaries(run_dir, list(run.summaries))
    again = json.loads((run_dir / "summary.json").read_text())
    for before, now in zip(written, again, strict=True):
        assert now.pop("machine") is None  # what this version adds: that run did not look
        assert now.pop("request_acceptance_rate") is None  # ... nor did its server speculate
        now.pop("mean_tokens_per_chunk")  # (read from its records now, as any run's is)
        assert now == before


def test_an_old_run_reports(tmp_path: Path) -> None:
    run_dir = copy_of_old_run(tmp_path)
    report = render_report([run_dir], tmp_path / "report.html", settings=SETTINGS)
    data = json.loads(report.files.json.read_text())
    (engine,) = data["engines"]
    assert [level["label"] for level in engine["levels"]] == ["c1", "c2"]
    assert report.decision.verdict is not None and (tmp_path / "report.md").is_file()


def test_a_run_json_missing_parts_or_from_a_newer_version_reads_what_it_can_and_the_report_says_so(
        tmp_path: Path) -> None:
    run_dir = copy_of_old_run(tmp_path)
    raw = json.loads((run_dir / "run.json").read_text())
    del raw["hardware"]
    raw["scenario"]["load"]["a_setting_of_the_future"] = 1  # does not validate with this version's Scenario
    (run_dir / "run.json").write_text(json.dumps(raw))
    run = read_run(run_dir)
    assert run.info.unread == ["hardware", "scenario"]
    assert run.info.hardware is None and run.info.scenario is None and run.info.gpu_names is None
    assert [s.level for s in run.summaries] == ["c1", "c2"]
    report = render_report([run_dir], tmp_path / "report.html", settings=SETTINGS)
    warnings = json.loads(report.files.json.read_text())["warnings"]
    assert any("lacks, or holds in a form this version does not read: hardware, scenario" in w for w in warnings)
