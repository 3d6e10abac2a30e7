"""`bench import FILE... --from vllm`: another tool's saved results as a run directory that `bench report`,
`bench compare`, `bench cost` and `bench history --import` read like a measured one.

Every file is read (and refused, naming the field, when it is not what `--from` says) before anything is
written. The run directory keeps a copy of each file under `imported/` and names the tool, its version where
the files say it, and each file's sha256 in run.json (`imported`); its levels are read again from those copies
each time the run is read (`bench/run/rundir.py imported_summaries`), so nothing is taken from a summary
written once.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from bench.imports import PLANNED, READERS, ImportFileError
from bench.run import rundir
from bench.run.runinfo import EngineRecord, ImportedFile, ImportRecord, RunInfo, ToolRecord


def import_results(files: Sequence[Path], tool: str, out: Path) -> Path:
    """The run directory made from `files` (one level each) of `tool`'s results."""
    if tool in PLANNED:
        raise ImportFileError(f"--from {tool}: its reader is not written yet; the tools read so far: "
                              f"{', '.join(READERS)}")
    if tool not in READERS:
        raise ImportFileError(f"--from {tool}: expected one of {', '.join(READERS)}")
    if not files:
        raise ImportFileError("bench import: give the result files to read")
    for path in files:
        if not path.is_file():
            raise ImportFileError(f"{path}: no such file")
    levels = [READERS[tool](path) for path in files]  # all read before anything is written
    labels = [level.label for level in levels]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ImportFileError(f"{', '.join(twice)}: two files at the same load; import them into runs of their own "
                              "(bench compare puts runs side by side)")
    engine = levels[0].engine
    run_dir = rundir.new_run_dir(out, f"{tool}-{engine}" if engine != tool else tool, "imported")
    folder = run_dir / rundir.IMPORTED_FOLDER
    folder.mkdir()
    kept = []
    for index, path in enumerate(files):
        name = f"{index:03d}-{path.name}"
        shutil.copyfile(path, folder / name)
        kept.append(ImportedFile(name, hashlib.sha256(path.read_bytes()).hexdigest(), str(path.resolve())))
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    info = RunInfo(run_id=run_dir.name, status="complete", started_at=now, finished_at=now,
                   tool=ToolRecord(name=tool, version=levels[0].tool_version or "unknown"),
                   engine=EngineRecord(name=engine, model=levels[0].model, launched_by="user"),
                   levels=labels, imported=ImportRecord(tool, levels[0].tool_version, kept))
    rundir.write_run_info(run_dir, info)
    rundir.write_summaries(run_dir, list(rundir.read_run(run_dir).summaries))
    return run_dir
