"""A tune's configurations run side by side, each where a `Placer` puts it (`bench tune --cluster`).

Contract: `run_placed(plan, placer, say, failed)` starts every configuration not yet complete at once; the
placer runs each as soon as it has room (Ray: a node with the resources asked for), the rest wait. Each
configuration's sweep runs on its node (`bench.flows.tune_node`), whose run directory comes back in pieces as
its levels end (`bench.flows.run_pieces`) and is written into the tune folder, its state in tune.json after
every change; each poll tells the node which shipment was last written, so one lost on the way is sent again.
A configuration whose node is lost is marked interrupted (`--resume` goes on from the levels shipped), the
others go on. Ctrl-C asks every node to stop as Ctrl-C would, waits for their last pieces, then ends whatever
is left, and raises KeyboardInterrupt; any other failure of the driver leaves each unfinished configuration
interrupted as well. Returns how many configurations did not complete.

A placer is Ray's (`bench.flows.tune_ray.RayPlacer`) or, in tests, a stand-in speaking the same `Placer`
interface on this machine. A node's answers are not trusted: the names and paths it sends stay inside the
tune folder, and what it says reaches the screen and the files as plain printable text.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bench.flows.run_pieces import ShipmentError, write_piece
from bench.flows.sweep import remember_run
from bench.flows.tune_node import LINE_LIMIT, Shipment
from bench.flows.tune_plan import Tune, TuneEntry
from bench.run.rundir import RunDirError, read_run
from common.names import UnsafeNameError, inside

POLL_S = 0.5
NODE_LIMIT = 200  # characters of a node's name kept
STATUS_LIMIT = 2_000  # characters of a configuration's state kept (a failure quotes its engine's log)
STOP_WAIT_S = 60.0  # after Ctrl-C, how long the nodes get to stop their engines and ship their last pieces


class NodeLost(Exception):
    """A configuration's node (or its process there) went away mid-run; the message says what the placer knows."""


class NodeFailed(Exception):
    """A configuration could not run on its node at all (e.g. a dependency missing there); the message says why."""


class Placer(Protocol):
    """Where configurations run. Every call returns at once."""

    def start(self, name: str, spec: dict[str, Any], files: dict[str, bytes]) -> Any:
        """A handle for the configuration, which runs as soon as there is room for it."""

    def poll(self, handle: Any, applied: int) -> Shipment | None:
        """What the configuration's node shipped since the shipment numbered `applied` (0: none yet); None when
        nothing came yet (still waiting for room, or for the node's answer). Raises NodeLost or NodeFailed."""

    def stop(self, handle: Any) -> None:
        """Ask the configuration's sweep to stop as Ctrl-C would (it saves its run as interrupted)."""

    def release(self, handle: Any) -> None:
        """The configuration is done with: end whatever of it is left, free its room."""

    def close(self) -> None:
        """End everything still placed."""


@dataclass
class _Placed:
    entry: TuneEntry
    handle: Any
    local_name: str | None = None  # its run directory in the tune folder
    resumed_from: str | None = None  # the node it ran on before, when it goes on from its run directory
    node: str | None = None  # the node it runs on now, as that node names itself
    applied: int = 0  # the number of the last shipment written
    heard: bool = False  # its node has answered: it runs (else it may still wait for room)
    done: bool = False  # ended (or lost) and released


class _Shipper:
    """Shipments applied to a tune: files written, nodes and run directories named, states saved, lines said."""

    def __init__(self, plan: Tune, say: Callable[[str], None]) -> None:
        self.plan, self.say = plan, say

    def apply(self, placed: _Placed, shipment: Shipment) -> None:
        """Files first, then the state, then what was said (a line may be where Ctrl-C lands)."""
        entry = placed.entry
        placed.heard = True
        node = _plain(shipment.node, NODE_LIMIT)
        placed_on, placed.node = placed.node != node, node
        if placed.resumed_from and placed.resumed_from.split(", then ")[-1] != node:
            node = f"{placed.resumed_from}, then {node}"  # its levels come from two machines
        entry.node = node
        if shipment.run_dir is not None and placed.local_name is None:
            placed.local_name = self._name_for(entry, shipment.run_dir)
            entry.run_dir = placed.local_name
        if shipment.pieces and placed.local_name is not None:
            run_dir = self.plan.folder / placed.local_name
            run_dir.mkdir(mode=0o700, exist_ok=True)
            for piece in shipment.pieces:
                write_piece(run_dir, piece)
        placed.applied = shipment.number
        if shipment.status is not None:
            entry.status = _plain(shipment.status, STATUS_LIMIT)
            if entry.status == "complete" and placed.local_name is not None:
                _remember(self.plan.folder, placed.local_name)
        self.plan.save()
        if placed_on:
            self.say(f"{entry.config.name}: running on {node}")
        for line in shipment.lines:
            self.say(f"{entry.config.name}: {_plain(line, LINE_LIMIT)}")

    def _name_for(self, entry: TuneEntry, node_name: str) -> str:
        """The run directory's name in the tune folder: the node's, unless another configuration has it."""
        if entry.run_dir:
            return entry.run_dir
        if _plain(node_name, NODE_LIMIT) != node_name:
            raise UnsafeNameError(f"a node's run directory: {node_name[:80]!r} is not a plain printable name")
        inside(self.plan.folder, node_name, "a node's run directory")
        taken = {e.run_dir for e in self.plan.entries if e is not entry}
        name, suffix = node_name, 1
        while name in taken or (self.plan.folder / name).exists():
            suffix += 1
            name = f"{node_name}-{suffix}"
        return name


def run_placed(plan: Tune, placer: Placer, say: Callable[[str], None],
               failed: Callable[[str, str], None]) -> int:
    """Every configuration not yet complete measured where the placer puts it (see the module's contract)."""
    shipper = _Shipper(plan, say)
    placed: list[_Placed] = []
    try:
        for entry in plan.entries:
            if entry.status == "complete":
                say(f"{entry.config.name}: complete, not run again")
                continue
            goes_on = entry.status == "interrupted" and bool(entry.run_dir)
            if not goes_on:
                entry.run_dir, entry.status = None, "pending"  # run afresh: an earlier failed run is not its figures
            files = _files_of(plan.folder / entry.run_dir) if entry.run_dir else {}
            spec = {"engine": plan.engine, "objective": plan.objective, "settings": _for_nodes(plan.settings),
                    "min_accuracy": plan.min_accuracy, "config": {"name": entry.config.name,
                                                                 "args": entry.config.args},
                    "run_dir": entry.run_dir, "status": entry.status}
            handle = placer.start(entry.config.name, spec, files)
            placed.append(_Placed(entry, handle, entry.run_dir, entry.node if goes_on else None))
        plan.save()
        _follow(placed, placer, shipper, failed)
    except KeyboardInterrupt:
        _stop_all(placed, placer, shipper)
        raise
    except BaseException:
        _leave_interrupted(placed, plan)  # what was shipped is kept for --resume
        raise
    finally:
        placer.close()
    return sum(entry.status != "complete" for entry in plan.entries)


def _follow(placed: list[_Placed], placer: Placer, shipper: _Shipper, failed: Callable[[str, str], None]) -> None:
    """Each placed configuration polled until it ends, its node is lost, or its node is not trusted further."""
    running = list(placed)
    while running:
        for one in list(running):
            name = one.entry.config.name
            try:
                shipment = placer.poll(one.handle, one.applied)
                if shipment is None:
                    continue
                shipper.apply(one, shipment)
            except NodeLost as lost:
                one.entry.status = "interrupted"
                failed(name, f"interrupted: {lost} (bench tune --resume goes on from the levels it shipped)")
            except NodeFailed as why:
                one.entry.status = f"failed: {_plain(str(why), STATUS_LIMIT)}"
                failed(name, one.entry.status.removeprefix("failed: "))
            except (UnsafeNameError, ShipmentError) as unsafe:
                one.entry.status = f"failed: {unsafe}"
                failed(name, str(unsafe))
            else:
                if shipment.status is None:
                    continue
                if shipment.status != "complete":
                    failed(name, one.entry.status.removeprefix("failed: "))
            shipper.plan.save()
            running.remove(one)
            one.done = True
            placer.release(one.handle)
        time.sleep(POLL_S)


def _stop_all(placed: list[_Placed], placer: Placer, shipper: _Shipper) -> None:
    """Ctrl-C: every node asked to stop, their last pieces written, each one not complete saved as interrupted
    (one that never started stays pending), and each node's staging folder removed."""
    running = [one for one in placed if not one.done and one.heard]  # one still waiting for room is not started
    try:
        shipper.say(f"stopping the {len(running)} configurations running on their nodes")
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
        _leave_interrupted(placed, shipper.plan)
        for one in running:
            placer.release(one.handle)


def _leave_interrupted(placed: list[_Placed], plan: Tune) -> None:
    """Each configuration that started and did not end saved as interrupted, so --resume goes on with it."""
    for one in placed:
        ended = one.entry.status == "complete" or one.entry.status.startswith("failed")
        if not ended and (one.heard or one.entry.run_dir):
            one.entry.status = "interrupted"
    plan.save()


def _for_nodes(settings: dict[str, Any]) -> dict[str, Any]:
    """The tune's settings with each file a flag names made absolute: a node reads it at the same path (a shared
    filesystem), not from its own working folder."""
    flags = dict(settings.get("flags", {}))
    for name in ("tokenizer", "dataset", "adapters_dir", "scenario", "model"):
        value = flags.get(name)
        # a scenario or a model may be a name (chat, dummy:tiny), made absolute only where it is a path here
        if isinstance(value, str) and value and (name not in ("scenario", "model") or Path(value).exists()):
            flags[name] = str(Path(value).resolve())
    return {**settings, "flags": flags}


def _remember(folder: Path, run_dir: str) -> None:
    """A configuration's complete run into the tune folder's history, as a run measured here is."""
    try:
        remember_run(read_run(folder / run_dir), folder)
    except RunDirError:
        pass


def _plain(text: object, limit: int) -> str:
    """A node's words as one printable line (no terminal escape sequence reaches the driver's screen)."""
    return "".join(c if c.isprintable() else " " for c in str(text)[:limit])


def _files_of(run_dir: Path) -> dict[str, bytes]:
    """A run directory's files, to go on with it on another node."""
    if not run_dir.is_dir():
        return {}
    return {path.relative_to(run_dir).as_posix(): path.read_bytes() for path in sorted(run_dir.rglob("*"))
            if path.is_file() and not path.is_symlink() and not path.name.endswith(".tmp")}
