"""The same run directories give the same outputs, release after release: `bench summarize`'s summary.json,
`bench report`'s report.json and `bench cost --json`, compared with what this version wrote once
(tests/bench/data/golden/), apart from when they were made and where the copy lies. Prices are judged as on a
fixed day (`--as-of`), so the answer does not change as the catalog ages.

After a change that means to change an output, write them again and read the diff:

    python -m tests.bench.test_same_outputs --write
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.bench.test_cli import bench

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden"
RUNS = ("run-eab334d", "run-dummy-2levels")  # an old endpoint run (scripted server), and the reference engine's
AS_OF = "2026-12-05"
DECISION = ["--gpu", "h100-sxm", "--provider", "together/llama-3.1-8b", "--monthly-tokens", "3e9", "--as-of", AS_OF]
COST = ["cost", "--throughput", "1200", "--input-tokens", "512", "--output-tokens", "256", "--peak-to-average", "3",
        "--json", *DECISION]


def normalized(value: Any, where: str) -> Any:
    """`value` without what changes from one making to the next: the time it was made and the copy's folder."""
    if isinstance(value, dict):
        return {key: normalized(item, where) for key, item in value.items() if key != "generated_at"}
    if isinstance(value, list):
        return [normalized(item, where) for item in value]
    if isinstance(value, str):
        return value.replace(where, "<RUN>")
    return value


def outputs(tmp_path: Path) -> dict[str, Any]:
    """Every output, by the golden file's name, made by the real commands from copies of the runs."""
    made: dict[str, Any] = {}
    for name in RUNS:
        run_dir = tmp_path / name
        shutil.copytree(DATA / name, run_dir)
        for command in (["summarize", str(run_dir)],
                        ["report", str(run_dir), *DECISION, "--out", str(run_dir / "report.html")]):
            result = bench(*command)
            assert result.returncode == 0, (command, result.stderr)
        for output in ("summary.json", "report.json"):
            made[f"{name}.{output}"] = normalized(json.loads((run_dir / output).read_text()), str(run_dir))
    result = bench(*COST)
    assert result.returncode == 0, result.stderr
    made["cost.json"] = json.loads(result.stdout)
    return made


@pytest.mark.parametrize("name", [f"{run}.{output}" for run in RUNS for output in ("summary.json", "report.json")]
                         + ["cost.json"])
def test_the_same_runs_give_the_same_outputs(name: str, made: dict[str, Any]) -> None:
    assert made[name] == json.loads((GOLDEN / name).read_text())


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return outputs(tmp_path_factory.mktemp("same-outputs"))


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        for file_name, content in outputs(Path(folder)).items():
            (GOLDEN / file_name).write_text(json.dumps(content, indent=1, sort_keys=True) + "\n")
            print(f"wrote {GOLDEN / file_name}")
