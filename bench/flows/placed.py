"""Measuring jobs run side by side, each where a `Placer` puts it: a tune's configurations (`bench tune
--cluster`) or a sweep's engines (`bench sweep --cluster`).

Contract: `run_placed(works, placer, save, say, failed, resume_with)` starts every work at once; the placer runs
each as soon as it has room (Ray: a node with the resources asked for), the rest wait. Each work's sweep runs on
its node (`bench.flows.node_run`), whose run directory comes back in pieces as its levels end
(`bench.flows.run_pieces`) and is written into the work's folder, its state kept in the work's `Slot` and saved
(`save`) after every change; each poll tells the node which shipment was last written, so one lost on the way is
sent again. A work whose node is lost is marked interrupted (its run directory goes on from the levels shipped,
with `resume_with`), the others go on. Ctrl-C asks every node to stop as Ctrl-C would, waits for their last
pieces, then ends whatever is left, and raises KeyboardInterrupt; any other failure of the driver leaves each
unfinished work interrupted as well.

A placer is Ray's (`bench.flows.ray_placer.RayPlacer`) or, in tests, a stand-in speaking the same `Placer`
interface on this machine. A node's answers are not trusted: the names and paths it sends stay inside the
work's folder, and what it says reaches the screen and the files as plain printable text.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.flows.node_run import LINE_LIMIT, Shipment
from bench.flows.run_pieces import ShipmentError, write_piece
from bench.flows.sweep import remember_run
from bench.run.rundir import RunDirError, read_run
from common.names import UnsafeNameError, inside
from common.private import make_private_dir

POLL_S = 0.5
NODE_LIMIT = 200  # characters of a node's name kept
STATUS_LIMIT = 2_000  # characters of a work's state kept (a failure quotes its engine's log)
STOP_WAIT_S = 60.0  # after Ctrl-C, how long the nodes get to stop their engines and ship their last pieces


class ClusterError(ValueError):
    """A cluster that can't be used as asked; the message names the flag and what would be accepted."""


class NodeLost(Exception):
    """A work's node (or its process there) went away mid-run; the message says what the placer knows."""


class NodeFailed(Exception):
    """A work could not run on its node at all (e.g. a dependency missing there); the message says why."""


class Placer(Protocol):
    """Where works run. Every call returns at once."""

    def start(self, name: str, spec: dict[str, Any], files: dict[str, bytes]) -> Any:
        """A handle for the work, which runs as soon as there is room for it."""

    def poll(self, handle: Any, applied: int) -> Shipment | None:
        """What the work's node shipped since the shipment numbered `applied` (0: none yet); None when nothing
        came yet (still waiting for room, or for the node's answer). Raises NodeLost or NodeFailed."""

    def stop(self, handle: Any) -> None:
        """Ask the work's sweep to stop as Ctrl-C would (it saves its run as interrupted)."""

    def release(self, handle: Any) -> None:
        """The work is done with: end whatever of it is left, free its room."""

    def close(self) -> None:
        """End everything still placed."""


class Slot(Protocol):
    """A work's state as its command keeps it (a tune's `TuneEntry`, a sweep's `SweepSlot`)."""

    run_dir: str | None  # its run directory's name in the work's folder, once known
    status: str  # pending, complete, interrupted, failed: REASON
    node: str | None  # the node it runs (or ran) on


@dataclass(eq=False)
class Work:
    """One job to place: what it is called in the lines said, the spec and files its node gets, and where its
    run directory goes."""

    name: str
    slot: Slot
    folder: Path
    spec: dict[str, Any]
    files: dict[str, bytes] = field(default_factory=dict)
    resumed_from: str | None = None  # the node it ran on before, when it goes on from its run directory


@dataclass
class _Placed:
    work: Work
    handle: Any
    node: str | None = None  # the node it runs on now, as that node names itself
    applied: int = 0  # the number of the last shipment written
    heard: bool = False  # its node has answered: it runs (else it may still wait for room)
    done: bool = False  # ended (or lost) and released


class _Shipper:
    """Shipments applied: files written, nodes and run directories named, states saved, lines said."""

    def __init__(self, works: list[Work], save: Callable[[], None], say: Callable[[str], None]) -> None:
        self.works, self.save, self.say = works, save, say

    def apply(self, placed: _Placed, shipment: Shipment) -> None:
        """Files first, then the state, then what was said (a line may be where Ctrl-C lands)."""
        work, slot = placed.work, placed.work.slot
        placed.heard = True
        node = plain(shipment.node, NODE_LIMIT)
        placed_on, placed.node = placed.node != node, node
        if work.resumed_from and work.resumed_from.split(", then ")[-1] != node:
            node = f"{work.resumed_from}, then {node}"  # its levels come from two machines
        slot.node = node
        if shipment.run_dir is not None and slot.run_dir is None:
            slot.run_dir = self._name_for(work, shipment.run_dir)
        if shipment.pieces and slot.run_dir is not None:
            run_dir = make_private_dir(work.folder / slot.run_dir, exist_ok=True)  # its runs folder too, if new
            for piece in shipment.pieces:
                write_piece(run_dir, piece)
        placed.applied = shipment.number
        if shipment.status is not None:
            slot.status = plain(shipment.status, STATUS_LIMIT)
            if slot.status == "complete" and slot.run_dir is not None:
                _remember(work.folder, slot.run_dir)
        self.save()
        if placed_on:
            self.say(f"{work.name}: running on {node}")
        for line in shipment.lines:
            self.say(f"{work.name}: {plain(line, LINE_LIMIT)}")

    def _name_for(self, work: Work, node_name: str) -> str:
        """The run directory's name in the work's folder: the node's, unless another work or folder has it. A
        hidden name (.history, the folder's history) is not a run directory's."""
        if plain(node_name, NODE_LIMIT) != node_name or node_name.startswith("."):
            raise UnsafeNameError(f"a node's run directory: {node_name[:80]!r} is not a plain printable name")
        inside(work.folder, node_name, "a node's run directory")
        taken = {w.slot.run_dir for w in self.works if w is not work and w.folder == work.folder}
        name, suffix = node_name, 1
        while name in taken or (work.folder / name).exists():
            suffix += 1
            name = f"{node_name}-{suffix}"
        return name


def run_placed(works: list[Work], placer: Placer, save: Callable[[], None], say: Callable[[str], None],
               failed: Callable[[str, str], None], resume_with: str) -> int:
    """Every work measured where the placer puts it (see the module's contract); how many did not complete.
    `resume_with`: the command that goes on with an interrupted one, as the lost-node line names it."""
    shipper = _Shipper(works, save, say)
    placed: list[_Placed] = []
    try:
        for work in works:
            placed.append(_Placed(work, placer.start(work.name, work.spec, work.files)))
        save()
        _follow(placed, placer, shipper, failed, resume_with)
    except KeyboardInterrupt:
        _stop_all(placed, placer, shipper)
        raise
    except BaseException:
        _leave_interrupted(placed, save)  # what was shipped is kept for --resume
        raise
    finally:
        placer.close()
    return sum(work.slot.status != "complete" for work in works)


def _follow(placed: list[_Placed], placer: Placer, shipper: _Shipper, failed: Callable[[str, str], None],
            resume_with: str) -> None:
    """Each placed work polled until it ends, its node is lost, or its node is not trusted further."""
    running = list(placed)
    while running:
        for one in list(running):
            name, slot = one.work.name, one.work.slot
            try:
                shipment = placer.poll(one.handle, one.applied)
                if shipment is None:
                    continue
                shipper.apply(one, shipment)
            except NodeLost as lost:
                slot.status = "interrupted"
                failed(name, f"interrupted: {lost} ({resume_with} goes on from the levels it shipped)")
            except NodeFailed as why:
                slot.status = f"failed: {plain(str(why), STATUS_LIMIT)}"
                failed(name, slot.status.removeprefix("failed: "))
            except (UnsafeNameError, ShipmentError) as unsafe:
                slot.status = f"failed: {unsafe}"
                failed(name, str(unsafe))
            else:
                if shipment.status is None:
                    continue
                if shipment.status != "complete":
                    failed(name, slot.status.removeprefix("failed: "))
            shipper.save()
            running.remove(one)
            one.done = True
            placer.release(one.handle)
        time.sleep(POLL_S)


def _stop_all(placed: list[_Placed], placer: Placer, shipper: _Shipper) -> None:
    """Ctrl-C: every node asked to stop, their last pieces written, each work not complete saved as interrupted
    (one that never started stays pending), and each node's staging folder removed."""
    running = [one for one in placed if not one.done and one.heard]  # one still waiting for room is not started
    try:
        shipper.say(f"stopping the {len(running)} running on their nodes")
        for one in running:
            placer.stop(one.handle)
        deadline = time.monotonic() + STOP_WAIT_S
        waiting = list(running)
        while waiting and time.monotonic() < deadline:
            for one in list(waiting):
                try:
                    shipment = placer.poll(one.handle, one.applied)
                    if shipment is not None:
                        shipper.apply(one, shipment)
                except (NodeLost, NodeFailed, UnsafeNameError, ShipmentError):
                    waiting.remove(one)
                    continue
                if shipment is not None and shipment.status is not None:
                    waiting.remove(one)
            time.sleep(POLL_S)
    except KeyboardInterrupt:  # a second Ctrl-C: stop waiting, end them now
        pass
    finally:
        _leave_interrupted(placed, shipper.save)
        for one in running:
            placer.release(one.handle)


def _leave_interrupted(placed: list[_Placed], save: Callable[[], None]) -> None:
    """Each work that started and did not end saved as interrupted, so --resume goes on with it."""
    for one in placed:
        slot = one.work.slot
        ended = slot.status == "complete" or slot.status.startswith("failed")
        if not ended and (one.heard or slot.run_dir):
            slot.status = "interrupted"
    save()


def for_nodes(settings: dict[str, Any]) -> dict[str, Any]:
    """Measuring settings with each file a flag names made absolute: a node reads it at the same path (a shared
    filesystem), not from its own working folder."""
    flags = dict(settings.get("flags", {}))
    for name in ("tokenizer", "dataset", "adapters_dir", "scenario", "model"):
        value = flags.get(name)
        # a scenario or a model may be a name (chat, dummy:tiny), made absolute only where it is a path here
        if isinstance(value, str) and value and (name not in ("scenario", "model") or Path(value).exists()):
            flags[name] = str(Path(value).resolve())
    if flags.get("engine_file"):
        flags["engine_file"] = [str(Path(path).resolve()) for path in flags["engine_file"]]
    if flags.get("lora"):  # NAME=PATH, the path a PEFT folder
        flags["lora"] = [f"{name}={Path(path).resolve()}" if sep else name
                         for name, sep, path in (item.partition("=") for item in flags["lora"])]
    if isinstance(flags.get("ui_python"), str) and Path(flags["ui_python"]).exists():
        flags["ui_python"] = str(Path(flags["ui_python"]).absolute())  # a venv's python: its link kept
    return {**settings, "flags": flags}


def _remember(folder: Path, run_dir: str) -> None:
    """A complete run into its folder's history, as a run measured here is."""
    try:
        remember_run(read_run(folder / run_dir), folder)
    except RunDirError:
        pass


def plain(text: object, limit: int) -> str:
    """A node's words as one printable line (no terminal escape sequence reaches the driver's screen)."""
    return "".join(c if c.isprintable() else " " for c in str(text)[:limit])


def files_of(run_dir: Path) -> dict[str, bytes]:
    """A run directory's files, to go on with it on another node."""
    if not run_dir.is_dir():
        return {}
    return {path.relative_to(run_dir).as_posix(): path.read_bytes() for path in sorted(run_dir.rglob("*"))
            if path.is_file() and not path.is_symlink() and not path.name.endswith(".tmp")}
