"""A run directory copied from one machine to another in pieces, while it is being written.

Contract: `Pieces.changed(run_dir)` returns, for each file that changed since the last call, the bytes that
bring the other side's copy up to date (`FilePiece`): the new bytes of a file that only grew (records, logs),
up to its last whole line for a JSONL file, else the whole file. The other side writes them with
`write_piece`, which refuses a path out of the run directory and a piece that starts past the end of its copy.
Pieces the other side did not confirm are sent again (`rewind()` goes back to what was last `confirm()`ed),
and writing a piece twice leaves the copy as writing it once.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from common.names import UnsafeNameError

APPENDED = (".jsonl", ".log")  # files that only grow while a run writes them: sent as their new bytes


class ShipmentError(ValueError):
    """A piece that can't be written where it says: past the end of the copy it adds to."""


@dataclass(frozen=True)
class FilePiece:
    """Bytes of one file of the run directory: written at `offset` (0: the file anew), the file then ends there."""

    path: str  # relative to the run directory, `/`-separated
    offset: int
    data: bytes


@dataclass(frozen=True)
class _Shipped:
    """What the driver has of one file: its first `size` bytes (their digest), as the file was then."""

    size: int
    digest: bytes
    stat: tuple[int, int]  # (size, mtime_ns) of the file when shipped whole; a file shipped in part is read again

    @classmethod
    def of(cls, before: os.stat_result, data: bytes, size: int) -> _Shipped:
        """`size` bytes of `data` shipped, read from a file whose stat was `before` just before it was read (so a
        change made while it was read is seen next time). A file shipped in part is read again each time."""
        whole = size == len(data) == before.st_size
        return cls(size, hashlib.blake2b(data[:size]).digest(),
                   (before.st_size, before.st_mtime_ns) if whole else (-1, -1))

    def unchanged(self, path: Path) -> bool:
        stat = path.stat()
        return self.stat == (stat.st_size, stat.st_mtime_ns)

    def is_prefix_of(self, data: bytes) -> bool:
        return 0 < self.size <= len(data) and hashlib.blake2b(data[:self.size]).digest() == self.digest


class Pieces:
    """What the other side has of each file of a run directory, and the pieces that bring it up to date."""

    def __init__(self) -> None:
        self._shipped: dict[str, _Shipped] = {}  # as sent
        self._confirmed: dict[str, _Shipped] = {}  # as the other side said it wrote

    def have(self, relative: str, path: Path, data: bytes) -> None:
        """The other side has `data` as this file (it sent it to go on with)."""
        self._shipped[relative] = self._confirmed[relative] = _Shipped.of(path.stat(), data, len(data))

    def any(self) -> bool:
        return bool(self._shipped)

    def confirm(self) -> None:
        """Everything sent so far was written."""
        self._confirmed = dict(self._shipped)

    def rewind(self) -> None:
        """What was sent since the last confirmation was lost: it goes again."""
        self._shipped = dict(self._confirmed)

    def changed(self, run_dir: Path) -> list[FilePiece]:
        """Each file of the run directory that changed since it was last shipped: its new bytes."""
        pieces = []
        for path in sorted(run_dir.rglob("*")):
            if not path.is_file() or path.is_symlink() or path.name.endswith(".tmp"):
                continue
            relative = path.relative_to(run_dir).as_posix()
            shipped = self._shipped.get(relative)
            if shipped is not None and shipped.unchanged(path):
                continue
            before = path.stat()
            data = path.read_bytes()
            # New bytes after what was shipped, if the file only grew since (a resumed run rewrites its records)
            appended = path.name.endswith(APPENDED) and shipped is not None and shipped.is_prefix_of(data)
            offset = shipped.size if appended and shipped is not None else 0
            end = len(data)
            if path.name.endswith(".jsonl"):  # a record still being written goes in the next piece
                end = offset + data[offset:].rfind(b"\n") + 1
            pieces.append(FilePiece(relative, offset, data[offset:end]))
            self._shipped[relative] = _Shipped.of(before, data, end)
        return pieces


def safe_path(root: Path, relative: str) -> Path:
    """`root / relative` for a path a node sent: plain names inside `root` only (no `..`, no absolute path, no
    link followed out of it); else UnsafeNameError naming it."""
    parts = relative.split("/")
    if not relative or any(part in ("", ".", "..") or "\\" in part or "\0" in part for part in parts):
        raise UnsafeNameError(f"a shipped file: {relative[:120]!r} is not a plain path inside the run directory")
    path = root.joinpath(*parts)
    if not path.resolve().is_relative_to(root.resolve()) or any(p.is_symlink() for p in path.parents
                                                                 if p.is_relative_to(root)):
        raise UnsafeNameError(f"a shipped file: {relative[:120]!r} leads outside the run directory")
    return path


def write_piece(run_dir: Path, piece: FilePiece) -> None:
    """One piece into its file: a whole file replaced at once, new bytes written where the copy ends."""
    target = safe_path(run_dir, piece.path)  # the sender does not choose where this side writes
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if piece.offset == 0:
        temporary = target.with_name(target.name + ".tmp")
        temporary.write_bytes(piece.data)
        temporary.replace(target)
        return
    with target.open("r+b") as file:
        if file.seek(0, os.SEEK_END) < piece.offset:  # never bytes written where they do not belong
            raise ShipmentError(f"a shipped piece of {piece.path} starts at byte {piece.offset}, but the copy "
                                f"holds {file.tell()} bytes of it")
        file.seek(piece.offset)  # a piece sent again (its first sending lost on the way) replaces what came of it
        file.write(piece.data)
        file.truncate()
