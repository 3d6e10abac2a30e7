"""A tune's configurations run side by side, each where a `Placer` puts it (`bench tune --cluster`).

Contract: `run_placed(plan, placer, watch)` starts every configuration not yet complete at once; the placer
runs each as soon as it has room (Ray: a node with the resources asked for), the rest wait. Each
configuration's sweep runs on its node (`bench.flows.tune_node`), whose run directory comes back in pieces as
its levels end and is written into the tune folder, its state in tune.json after every change. A configuration
whose node is lost is marked interrupted (`--resume` goes on from the levels shipped), the others go on.
Ctrl-C asks every node to stop as Ctrl-C would, waits for their last pieces, then ends whatever is left, and
raises KeyboardInterrupt. Returns how many configurations did not complete.

A placer is Ray's (`bench.flows.tune_ray.RayPlacer`) or, in tests, a stand-in speaking the same `Placer`
interface on this machine.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bench.flows.tune_node import LINE_LIMIT, FilePiece, Shipment, safe_path
from bench.flows.tune_plan import Tune, TuneEntry
from common.names import UnsafeNameError, inside

POLL_S = 0.5
NODE_LIMIT = 200  # characters of a node's name kept
STOP_WAIT_S = 60.0  # after Ctrl-C, how long the nodes get to stop their engines and ship their last pieces


class ShipmentError(ValueError):
    """A node's shipment that can't be written as it is: a path out of the run directory, a piece out of place."""


class NodeLost(Exception):
    """A configuration's node (or its process there) went away mid-run; the message says what the placer knows."""


class Placer(Protocol):
    """Where configurations run. Every call returns at once."""

    def start(self, name: str, spec: dict[str, Any], files: dict[str, bytes]) -> Any:
        """A handle for the configuration, which runs as soon as there is room for it."""

    def poll(self, handle: Any) -> Shipment | None:
        """What the configuration's node shipped since the last poll; None when nothing came yet (still waiting
        for room, or for the node's answer). Raises NodeLost."""

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
    done: bool = False  # ended (or lost) and released
    heard: bool = False  # its node has answered: it runs (else it may still wait for room)


class _Shipper:
    """Shipments applied to a tune: lines said, nodes and run directories named, pieces written, states saved."""

    def __init__(self, plan: Tune, say: Callable[[str], None]) -> None:
        self.plan, self.say = plan, say

    def apply(self, placed: _Placed, shipment: Shipment) -> None:
        """A shipment applied whole: Ctrl-C meanwhile takes effect once it is (the node counts it as delivered)."""
        with _interrupt_deferred():
            self._apply(placed, shipment)

    def _apply(self, placed: _Placed, shipment: Shipment) -> None:
        """Files first, then the state, then what was said (a watcher may stop the tune on a line)."""
        entry = placed.entry
        placed.heard = True
        node = _plain(shipment.node, NODE_LIMIT)
        placed_on = entry.node != node
        entry.node = node
        if shipment.run_dir is not None and placed.local_name is None:
            placed.local_name = self._name_for(entry, shipment.run_dir)
            entry.run_dir = placed.local_name
        if shipment.pieces and placed.local_name is not None:
            run_dir = self.plan.folder / placed.local_name
            run_dir.mkdir(mode=0o700, exist_ok=True)
            for piece in shipment.pieces:
                write_piece(run_dir, piece)
        if shipment.status is not None:
            entry.status = shipment.status
        self.plan.save()
        if placed_on:
            self.say(f"{entry.config.name}: running on {node}")
        for line in shipment.lines:
            self.say(f"{entry.config.name}: {_plain(line, LINE_LIMIT)}")

    def _name_for(self, entry: TuneEntry, node_name: str) -> str:
        """The run directory's name in the tune folder: the node's, unless another configuration has it."""
        if entry.run_dir:
            return entry.run_dir
        inside(self.plan.folder, node_name, "a node's run directory")
        taken = {e.run_dir for e in self.plan.entries if e is not entry}
        name, suffix = node_name, 1
        while name in taken or (self.plan.folder / name).exists():
            suffix += 1
            name = f"{node_name}-{suffix}"
        return name


@contextmanager
def _interrupt_deferred() -> Iterator[None]:
    """Ctrl-C (and what stopping turns into it) held until the block ends, then raised; in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    before = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
    if received:
        raise KeyboardInterrupt


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
            if entry.status != "interrupted" or not entry.run_dir:
                entry.run_dir, entry.status = None, "pending"  # run afresh: an earlier failed run is not its figures
            files = _files_of(plan.folder / entry.run_dir) if entry.run_dir else {}
            spec = {"engine": plan.engine, "objective": plan.objective, "settings": _for_nodes(plan.settings),
                    "min_accuracy": plan.min_accuracy, "config": {"name": entry.config.name,
                                                                 "args": entry.config.args},
                    "run_dir": entry.run_dir, "status": entry.status}
            placed.append(_Placed(entry, placer.start(entry.config.name, spec, files), entry.run_dir))
        plan.save()
        _follow(placed, placer, shipper, failed)
    except KeyboardInterrupt:
        _stop_all(placed, placer, shipper)
        raise
    finally:
        placer.close()
    return sum(entry.status != "complete" for entry in plan.entries)


def _for_nodes(settings: dict[str, Any]) -> dict[str, Any]:
    """The tune's settings with each file a flag names made absolute: a node reads it at the same path (a shared
    filesystem), not from its own working folder."""
    flags = dict(settings.get("flags", {}))
    for name in ("tokenizer", "dataset", "adapters_dir", "scenario", "model"):
        value = flags.get(name)
        if isinstance(value, str) and value and (name not in ("scenario", "model") or Path(value).exists()):
            flags[name] = str(Path(value).resolve())
    return {**settings, "flags": flags}


def _follow(placed: list[_Placed], placer: Placer, shipper: _Shipper, failed: Callable[[str, str], None]) -> None:
    """Each placed configuration polled until it ends or its node is lost."""
    running = list(placed)
    while running:
        for one in list(running):
            try:
                shipment = placer.poll(one.handle)
                if shipment is None:
                    continue
                shipper.apply(one, shipment)
            except NodeLost as lost:
                one.entry.status = "interrupted"
                shipper.plan.save()
                failed(one.entry.config.name, f"interrupted: {lost} (bench tune --resume goes on from the levels "
                                              "it shipped)")
            except (UnsafeNameError, ShipmentError) as unsafe:  # its node is not trusted further
                one.entry.status = f"failed: {unsafe}"
                shipper.plan.save()
                failed(one.entry.config.name, str(unsafe))
            else:
                if shipment.status is None:
                    continue
                if shipment.status != "complete":
                    failed(one.entry.config.name, shipment.status.removeprefix("failed: "))
            running.remove(one)
            one.done = True
            placer.release(one.handle)
        time.sleep(POLL_S)


def _stop_all(placed: list[_Placed], placer: Placer, shipper: _Shipper) -> None:
    """Ctrl-C: every node asked to stop, their last pieces written, each one not complete saved as interrupted."""
    running = [one for one in placed if not one.done and one.heard]  # one still waiting for room is not started
    try:
        shipper.say(f"stopping the {len(running)} configurations running on their nodes")
        for one in running:
            placer.stop(one.handle)
        deadline = time.monotonic() + STOP_WAIT_S
        while running and time.monotonic() < deadline:
            for one in list(running):
                try:
                    shipment = placer.poll(one.handle)
                    if shipment is not None:
                        shipper.apply(one, shipment)
                except (NodeLost, UnsafeNameError, ShipmentError):
                    running.remove(one)
                    continue
                if shipment is not None and shipment.status is not None:
                    running.remove(one)
            time.sleep(POLL_S)
    except KeyboardInterrupt:  # a second Ctrl-C: stop waiting, end them now
        pass
    finally:
        for one in placed:
            if not _ended(one.entry):
                one.entry.status = "interrupted"
        shipper.plan.save()


def _plain(text: str, limit: int) -> str:
    """A node's words as one printable line (no terminal escape sequence reaches the driver's screen)."""
    return "".join(c if c.isprintable() else " " for c in str(text)[:limit])


def _ended(entry: TuneEntry) -> bool:
    return entry.status == "complete" or entry.status.startswith("failed")


def write_piece(run_dir: Path, piece: FilePiece) -> None:
    """One piece into its file: a whole file replaced at once, new bytes written after what is there."""
    target = safe_path(run_dir, piece.path)  # a node does not choose where the driver writes
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if piece.offset == 0:
        temporary = target.with_name(target.name + ".tmp")
        temporary.write_bytes(piece.data)
        temporary.replace(target)
        return
    with target.open("r+b") as file:
        if file.seek(0, os.SEEK_END) != piece.offset:  # never bytes written where they do not belong
            raise ShipmentError(f"a shipped piece of {piece.path} starts at byte {piece.offset}, but the tune folder "
                                f"holds {file.tell()} bytes of it")
        file.write(piece.data)


def _files_of(run_dir: Path) -> dict[str, bytes]:
    """A run directory's files, to go on with it on another node."""
    if not run_dir.is_dir():
        return {}
    return {path.relative_to(run_dir).as_posix(): path.read_bytes() for path in sorted(run_dir.rglob("*"))
            if path.is_file() and not path.is_symlink() and not path.name.endswith(".tmp")}
