"""The notes beside each level in the summary table, printed as numbered footnotes under it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from bench.commands.tables import _notes
from loadgen.metrics import summarize
from loadgen.types import RequestRecord
from tests.bench.test_cli import BENCH
from tests.bench.test_old_runs import OLD_RUN


def _request(user: int, end_s: float, send_s: float = 0.0) -> RequestRecord:
    """Ten tokens, the first 0.1 s after sending; chunk times are relative to the send."""
    times = [0.1 + (end_s - send_s - 0.1) * k / 9 for k in range(10)]
    return RequestRecord(run_id="r", engine="e", level="c4", request_id=user, send_s=send_s, dispatch_s=send_s,
                         user=user, chunk_times_s=times, chunk_tokens=[1] * 10, end_s=end_s, output_tokens=10, ok=True)


def test_a_level_with_fewer_completions_than_users_says_to_lengthen_it() -> None:
    # Four users, one request each, ending 1 s apart: the steady window closes when the first user stops.
    short = summarize([_request(user, end_s=1.0 + user) for user in range(4)])
    assert any("lengthen --duration" in note for note in _notes(short))
    # Each user finishing several requests inside the window: no such note.
    steady = summarize([_request(user, end_s=0.5 * k, send_s=0.5 * (k - 1)) for user in range(4) for k in range(1, 7)])
    assert not any("lengthen --duration" in note for note in _notes(steady))


def _run_with_busy_machine(tmp_path: Path) -> Path:
    """A real run directory (two levels, c1 and c2) whose levels.jsonl says the machine was busy: a long note of
    its own on each level (the CPU others used differs), and one both share (the same steal time). The busiest
    process's name is markup, as a process may be named."""
    run_dir = tmp_path / OLD_RUN.name
    shutil.copytree(OLD_RUN, run_dir)
    levels = run_dir / "levels.jsonl"
    rows = [json.loads(line) for line in levels.read_text().splitlines()]
    for index, row in enumerate(rows):
        wall_s = row["wall_s"]
        row["machine"] = {"wall_s": wall_s, "others_cpu_s": (0.5 + index) * wall_s, "steal_s": 0.4 * wall_s,
                          "busiest": [{"pid": 4242, "name": "[bold]make[/]", "cpu_s": 0.5 * wall_s}]}
    levels.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return run_dir


def _bench(*args: str, columns: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "COLUMNS": columns})
    assert result.returncode == 0, result.stderr
    return result


def _body_rows(stdout: str) -> list[str]:
    """The lines between a table's header rule and its bottom rule."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    return lines[start + 1:end]


def test_notes_are_numbered_footnotes_and_each_row_stays_one_line(tmp_path: Path) -> None:
    run_dir = _run_with_busy_machine(tmp_path)
    out = _bench("summarize", str(run_dir), columns="100").stdout
    rows = _body_rows(out)
    assert len(rows) == 2 and rows[0].startswith("│ ") and rows[1].startswith("│ ")  # c1 and c2: one line each
    assert all(len(line) <= 100 for line in out.splitlines())
    assert rows[0].rstrip().endswith("│ 1,2  │") and rows[1].rstrip().endswith("│ 3,2  │")  # the shared note is 2
    under = " ".join(out[out.index("└"):].split())  # the footnotes, wrapped at 100 columns, as one text
    assert "1. the machine was busy: processes outside the run used 0.50 of a core while this level ran " \
           "([bold]make[/] (pid 4242) 0.50)" in under  # a name that is markup is printed as it is
    assert "2. the hypervisor held back 0.40 of a core (steal time) while this level ran" in under
    assert "3. the machine was busy: processes outside the run used 1.50 of a core" in under
    assert under.count("hypervisor") == 1  # said once for both levels


def test_compare_numbers_the_notes_of_every_run_in_one_list(tmp_path: Path) -> None:
    run_dir = _run_with_busy_machine(tmp_path)
    out = _bench("compare", str(run_dir), str(run_dir), columns="160").stdout
    rows = _body_rows(out)
    assert len(rows) == 4 and all(row.startswith("│ ") for row in rows)  # c1 and c2 of both: one line each
    assert [row.split("│")[-2].strip() for row in rows] == ["1,2", "1,2", "3,2", "3,2"]
    assert " ".join(out[out.index("└"):].split()).count("the machine was busy") == 2
