"""A stand-in for Ray's placer (`bench.flows.ray_placer.RayPlacer`) on this machine: the same `Placer`
interface, `slots` stand-in nodes each running one configuration at a time in a staging folder of its own,
as a Ray actor runs it (`bench.flows.node_run.NodeRun`, the real node process); the rest wait for a slot.

`lose(handle)` is the one fault it adds: the node's process killed, and the node then answers as a lost Ray
node does (NodeLost)."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.flows.node_run import NodeRun, Shipment
from bench.flows.placed import NodeLost


@dataclass(eq=False)
class Handle:
    name: str
    spec: dict[str, Any]
    files: dict[str, bytes]
    node: str | None = None
    run: NodeRun | None = None
    lost: bool = False
    released: bool = False


class LocalPlacer:
    def __init__(self, slots: int, root: Path) -> None:
        self.root = root
        self.free = [f"stand-in-{index}" for index in range(slots)]
        self.waiting: list[Handle] = []
        self.handles: list[Handle] = []
        self.placements: list[tuple[str, str]] = []  # (configuration, node), in the order they were placed
        self.most_at_once = 0

    def start(self, name: str, spec: dict[str, Any], files: dict[str, bytes]) -> Handle:
        handle = Handle(name, spec, files)
        self.waiting.append(handle)
        self.handles.append(handle)
        self._place()
        return handle

    def poll(self, handle: Handle, applied: int) -> Shipment | None:
        self._place()
        if handle.lost:
            raise NodeLost(f"stand-in node {handle.node} lost")
        if handle.run is None:
            return None
        return handle.run.poll(applied)

    def stop(self, handle: Handle) -> None:
        if handle.run is not None:
            handle.run.stop()
        elif handle in self.waiting:
            self.waiting.remove(handle)

    def release(self, handle: Handle) -> None:
        if handle.released:
            return
        handle.released = True
        if handle in self.waiting:
            self.waiting.remove(handle)
        if handle.run is not None:
            handle.run.close()
        if handle.node is not None:
            self.free.append(handle.node)
        self._place()

    def close(self) -> None:
        self.waiting.clear()
        for handle in self.handles:
            self.release(handle)

    def lose(self, handle: Handle) -> None:
        assert handle.run is not None
        handle.run.process.send_signal(signal.SIGKILL)
        handle.run.process.wait()
        handle.lost = True

    def running(self) -> list[Handle]:
        return [h for h in self.handles if h.run is not None and not h.released]

    def _place(self) -> None:
        while self.free and self.waiting:
            handle = self.waiting.pop(0)
            handle.node = self.free.pop(0)
            staging = self.root / f"{handle.node}-{len(self.placements)}"
            handle.run = NodeRun(staging, handle.spec, handle.files, handle.node)
            self.placements.append((handle.name, handle.node))
            self.most_at_once = max(self.most_at_once, len(self.running()))
