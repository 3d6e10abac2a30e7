"""One measuring job (a tune's configuration, a sweep's engine) run on a node of a cluster, and its run
directory shipped back in pieces.

Contract: `NodeRun(staging, spec, files, node)` starts the job's sweep on this machine (a child
process, `python -m bench.commands.on_node STAGING PARENT_PID`, tied to this process so that it, and the
engine it launches with its lifeline, never outlives it). `poll(applied)` returns a `Shipment`: the lines the
sweep said since the last poll and, each time a level has ended (and once more when the sweep ends), the
pieces of its run directory that changed (`bench.flows.run_pieces`); `applied` says which shipment the driver
last wrote, and pieces it did not get go again. The driver writes the pieces into its own copy (in the tune or
runs folder), so a lost node loses at most the level in flight. `stop()` asks the sweep to stop as Ctrl-C would
(its run saved as interrupted); `close()` ends it for sure and removes the staging folder.

`spec` is what the node needs to know, in JSON: which job (`bench.commands.on_node` says what each takes), the
measuring settings, and (to go on with an interrupted one) its run directory's name and state, whose files come
in `files` (path in the run directory -> bytes). The node process leaves the job's state in STATUS_FILE.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.flows.run_pieces import FilePiece, Pieces, safe_path
from bench.run.rundir import LEVELS_FILE
from common.names import inside
from engines.lifeline import is_alive, owner_id

SPEC_FILE = "spec.json"
STATUS_FILE = "status.json"  # the job's state once it has ended: {"status": complete | interrupted | failed: ...}
OWNER_FILE = "owner"  # the process that runs the job here (engines.lifeline.owner_id)
STAGING_PREFIX = "bench-node-"
LOG_FILE = "node.log"
PACKAGES = ("bench", "common", "costmodel", "engines", "loadgen", "reports", "scenarios", "scripted")
LINE_LIMIT = 4_000  # characters of one said line kept; a line is the node's, and goes to the driver's screen


@dataclass(frozen=True)
class Shipment:
    """What a node has to say since its last poll."""

    node: str
    lines: tuple[str, ...] = ()
    run_dir: str | None = None  # the run directory's name, once it exists
    pieces: tuple[FilePiece, ...] = ()
    status: str | None = None  # the job's state once its sweep has ended: complete, interrupted, failed: ...
    number: int = 0  # the driver says which it last wrote: one lost on the way is sent again


class NodeRun:
    """A job's sweep on this node (see the module's contract)."""

    def __init__(self, staging: Path, spec: dict[str, Any], files: dict[str, bytes], node: str) -> None:
        self.staging, self.node = staging, node
        self.run_name: str | None = spec.get("run_dir")
        self.pieces = Pieces()
        self._number = 0  # of the last shipment
        self._levels_size = -1
        self._log_offset = 0
        staging.mkdir(parents=True, exist_ok=True)
        (staging / OWNER_FILE).write_text(owner_id())
        (staging / SPEC_FILE).write_text(json.dumps(spec))
        if self.run_name:  # an interrupted job goes on from its files
            run_dir = inside(staging, self.run_name, "the run directory to resume")
            for relative, data in files.items():
                target = safe_path(run_dir, relative)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                self.pieces.have(relative, target, data)  # the driver has them already
        self._log = (staging / LOG_FILE).open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.commands.on_node", str(staging), str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=_child_env())

    def poll(self, applied: int) -> Shipment:
        """The lines said since the last poll and, once a level has ended or the sweep has, what changed.
        `applied`: the number of the last shipment the driver wrote; if not the last one sent, that one was lost
        on the way, and its pieces go again."""
        if applied == self._number:
            self.pieces.confirm()
        else:
            self.pieces.rewind()
            self._levels_size = -1
        self._number += 1
        ended = self.process.poll() is not None
        lines = self._new_lines(ended)
        run_dir = self._run_dir()
        pieces: tuple[FilePiece, ...] = ()
        if run_dir is not None:
            levels = run_dir / LEVELS_FILE
            size = levels.stat().st_size if levels.is_file() else 0
            if ended or size != self._levels_size or not self.pieces.any():
                self._levels_size = size
                pieces = tuple(self.pieces.changed(run_dir))
        status = self._status() if ended else None
        return Shipment(self.node, lines, run_dir.name if run_dir else None, pieces, status, self._number)

    def stop(self) -> None:
        """As Ctrl-C: the sweep stops its engine and saves its run as interrupted."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)

    def close(self, grace_s: float = 30.0) -> None:
        """The sweep ended for sure (SIGINT, then SIGKILL after `grace_s`), and the staging folder removed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        shutil.rmtree(self.staging, ignore_errors=True)

    def _new_lines(self, ended: bool) -> tuple[str, ...]:
        """Whole lines said since the last call (every line left, once the sweep has ended)."""
        path = self.staging / LOG_FILE
        with path.open("rb") as log:
            log.seek(self._log_offset)
            data = log.read()
        cut = len(data) if ended else data.rfind(b"\n") + 1
        self._log_offset += cut
        return tuple(line[:LINE_LIMIT] for line in data[:cut].decode(errors="replace").splitlines() if line.strip())

    def _run_dir(self) -> Path | None:
        if self.run_name:
            return self.staging / self.run_name
        made = [p for p in self.staging.iterdir()  # not .history, which a finished run adds
                if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")]
        if len(made) == 1:
            self.run_name = made[0].name
            return made[0]
        return None

    def _status(self) -> str:
        """The job's state as the node's sweep saved it, or why it ended without saying."""
        try:
            status = str(json.loads((self.staging / STATUS_FILE).read_text())["status"])
        except (OSError, ValueError, KeyError, TypeError):
            status = "pending"
        if status != "pending":
            return status
        stopped = {128 + signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGHUP}  # stopping's exit codes
        if self.process.returncode in stopped | {-signal.SIGINT, -signal.SIGTERM, -signal.SIGKILL}:
            return "interrupted"
        tail = " | ".join((self.staging / LOG_FILE).read_text(errors="replace").strip().splitlines()[-5:])
        return f"failed: the node's sweep exited with code {self.process.returncode}: {tail[-600:]}"


def clear_stale_staging(root: Path) -> None:
    """Staging folders in `root` whose owner is gone (a node process killed before it could clean up)."""
    for folder in root.glob(STAGING_PREFIX + "*"):
        try:
            owner = (folder / OWNER_FILE).read_text()
        except OSError:
            continue
        if not is_alive(owner):
            shutil.rmtree(folder, ignore_errors=True)


def package_folders() -> list[str]:
    """Each of our packages' own folder, as a cluster job ships them."""
    specs = [importlib.util.find_spec(name) for name in PACKAGES]
    return [str(Path(spec.submodule_search_locations[0]).resolve()) for spec in specs
            if spec is not None and spec.submodule_search_locations]


def package_roots() -> list[str]:
    """The folders our packages are loaded from (on a cluster, one folder each)."""
    return list(dict.fromkeys(str(Path(folder).parent) for folder in package_folders()))


def _child_env() -> dict[str, str]:
    """This process's environment, with our packages' folders first on the path."""
    existing = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*package_roots(), *([existing] if existing else [])])}
