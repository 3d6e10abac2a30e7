"""`bench import FILE... --from vllm|guidellm|aiperf`: another tool's saved results as a run directory that
`bench report`, `bench compare`, `bench cost` and `bench history --import` read like a measured one.

Every file is read (and refused, naming the field, when it is not what `--from` says) before anything is
written. The run directory keeps a copy of each file under `imported/` and names the tool, its version where
the files say it, and each file's sha256 in run.json (`imported`); its levels are read again from those copies
each time the run is read (`bench/run/rundir.py imported_summaries`, which checks each copy's name and sha256
first), so nothing is taken from a summary written once. Files at the same load are its repeats (c8, c8#2, ...),
summarized with their interval as a sweep's `--repeats` are. What the files say is data: a name from them is a
slug in the run directory's name, and escaped wherever it is shown.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from bench.flows.sweep import remember_run
from bench.imports import ImportFileError, read_levels
from bench.run import rundir
from bench.run.runinfo import EngineRecord, ImportedFile, ImportRecord, RunInfo, ToolRecord
from common.names import inside, slug


def import_results(files: Sequence[Path], tool: str, out: Path, engine: str | None = None) -> Path:
    """The run directory made from `files` of `tool`'s results; `engine` names the engine where the files
    don't say it."""
    if not files:
        raise ImportFileError("bench import: give the result files to read")
    for path in files:
        if not path.is_file():
            raise ImportFileError(f"{path}: no such file")
    levels = read_levels(tool, files, engine=engine)  # all read before anything is written
    if not levels:
        raise ImportFileError(f"{', '.join(map(str, files))}: no level in the files (expected at least one "
                              "finished benchmark)")
    name = levels[0].engine  # the file's own word (vLLM's `backend`): data, a slug in the folder's name
    run_dir = rundir.new_run_dir(out, f"{tool}-{slug(name)}" if name != tool else tool, "imported")
    folder = run_dir / rundir.IMPORTED_FOLDER
    folder.mkdir()
    kept = []
    for index, path in enumerate(files):
        data = path.read_bytes()  # once: the copy is exactly what was hashed
        kept_name = f"{index:03d}-{slug(path.name, 'results.json')}"
        inside(folder, kept_name, "bench import").write_bytes(data)
        kept.append(ImportedFile(kept_name, hashlib.sha256(data).hexdigest(), str(path.resolve())))
    version = next((level.tool_version for level in levels if level.tool_version), None)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    info = RunInfo(run_id=run_dir.name, status="complete", started_at=now, finished_at=now,
                   tool=ToolRecord(name=tool, version=version or "unknown"),
                   engine=EngineRecord(name=name, model=levels[0].model, launched_by="user"),
                   levels=[level.label for level in levels], imported=ImportRecord(tool, version, kept, engine))
    rundir.write_run_info(run_dir, info)
    run = rundir.read_run(run_dir)
    rundir.write_summaries(run_dir, list(run.summaries))
    remember_run(run, out)  # in the runs folder's history, as a measured run is
    return run_dir
