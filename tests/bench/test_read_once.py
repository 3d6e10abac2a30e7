"""A run's records are read once: a sweep summarizes each level from the records it writes (nothing of
requests.jsonl is read back while its levels run), reads the run once when it ends and makes its report from
that; `bench report` reads requests.jsonl once; a resumed sweep reads it once more, when it starts. And the
summaries a sweep writes as it goes are the ones `bench summarize` makes from the files afterwards.

Real sweeps of the scripted server, in this process, with every open of requests.jsonl counted."""

from __future__ import annotations

import builtins
import json
import pathlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.run.tally import RunTally
from tests.bench.test_cli import only_run_dir
from tests.servers import ScriptedServer

REQUESTS = "requests.jsonl"


class Opens:
    """Every open of requests.jsonl in this process, as ("read" | "write", the levels ended before it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, int]] = []
        self.levels_ended = 0
        path_open, real_open, finished = pathlib.Path.open, builtins.open, RunTally.level_finished

        def note(file: object, mode: str) -> None:
            if Path(str(file)).name == REQUESTS:
                self.events.append(("write" if set(mode) & set("wax+") else "read", self.levels_ended))

        def counted_path_open(path: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            note(path, mode)
            return path_open(path, mode, *args, **kwargs)

        def counted_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            note(file, mode)
            return real_open(file, mode, *args, **kwargs)

        def level_finished(tally: RunTally, row: dict[str, Any]) -> Any:
            self.levels_ended += 1
            return finished(tally, row)

        monkeypatch.setattr(pathlib.Path, "open", counted_path_open)
        monkeypatch.setattr(builtins, "open", counted_open)
        monkeypatch.setattr(RunTally, "level_finished", level_finished)

    def reads(self) -> list[int]:
        """The number of levels ended before each read."""
        return [ended for kind, ended in self.events if kind == "read"]

    def clear(self) -> None:
        self.events.clear()
        self.levels_ended = 0


def sweep_args(server: ScriptedServer, out: Path, levels: str = "1,2,4") -> list[str]:
    return ["sweep", "--engine", "endpoint", "--base-url", server.base_url, "--model", "scripted", "--concurrency",
            levels, "--requests", "12", "--duration", "5", "--output-tokens", "8", "--input-tokens", "16",
            "--warmup", "2", "--out", str(out)]


def summary_of(run_dir: Path) -> list[dict[str, Any]]:
    return json.loads((run_dir / "summary.json").read_text())


def test_a_sweep_reads_its_records_once_at_its_end_and_its_report_reads_them_once(
        scripted: ScriptedServer, cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scripted.set_script(ttft_ms=5, itl_ms=2)
    opens = Opens(monkeypatch)
    result = cli(*sweep_args(scripted, tmp_path / "runs"))  # with its report (or the reason it has none)
    assert result.exit_code == 0, result.output
    assert opens.levels_ended == 3
    assert opens.reads() == [3]  # none while the levels ran: one, after the last, for the run and its report
    run_dir = only_run_dir(tmp_path / "runs")
    assert [row["level"] for row in summary_of(run_dir)] == ["c1", "c2", "c4"]

    opens.clear()
    result = cli("report", str(run_dir), "--gpu", "h100-sxm", "--out", str(tmp_path / "report.html"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.json").is_file()
    assert opens.reads() == [0]


def test_the_summaries_written_as_a_sweep_goes_are_those_bench_summarize_makes(
        scripted: ScriptedServer, cli: Callable[..., Any], tmp_path: Path) -> None:
    scripted.set_script(ttft_ms=5, itl_ms=2)
    out = tmp_path / "runs"
    assert cli(*sweep_args(scripted, out, "1,3"), "--repeats", "2", "--no-report").exit_code == 0
    run_dir = only_run_dir(out)
    written = {name: (run_dir / name).read_text() for name in ("summary.json", "summary.csv", "repeats.json")}
    assert [row["level"] for row in json.loads(written["summary.json"])] == ["c1", "c3", "c1#2", "c3#2"]

    result = cli("summarize", str(run_dir))
    assert result.exit_code == 0, result.output
    for name, text in written.items():  # the same records and levels.jsonl: the same bytes, timings included
        assert (run_dir / name).read_text() == text, name


def test_a_resumed_sweep_reads_its_records_once_as_it_starts_and_once_at_its_end(
        scripted: ScriptedServer, cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scripted.set_script(ttft_ms=5, itl_ms=2)
    out = tmp_path / "runs"
    assert cli(*sweep_args(scripted, out), "--no-report").exit_code == 0
    run_dir = only_run_dir(out)
    # As a run killed during c2 leaves it: c1 ended (its line in levels.jsonl), c2 has records and no end.
    first, *_ = (run_dir / "levels.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "levels.jsonl").write_text(first)
    info = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**info, "status": "interrupted", "finished_at": None}))
    c1 = summary_of(run_dir)[0]

    opens = Opens(monkeypatch)
    result = cli("sweep", "--resume", str(run_dir), "--no-report")
    assert result.exit_code == 0, result.output
    assert "c2, c4 cut short" in result.output or "c2 cut short" in result.output
    assert opens.levels_ended == 2  # c2 again, and c4
    assert opens.reads() == [0, 2]  # once before the first level (what the run holds), once at the end
    during = summary_of(run_dir)
    assert [row["level"] for row in during] == ["c1", "c2", "c4"]
    assert during[0] == c1  # the kept level's summary as it was

    assert cli("summarize", str(run_dir)).exit_code == 0
    assert summary_of(run_dir) == during
