"""Names that come from files or flags and become parts of paths, mount targets or command lines.

    slug("x/../../../tmp/p")              -> "x-tmp-p"
    check_adapter_name("sql", "--lora")   -> None; "../x" or "a:rw" raise UnsafeNameError naming "--lora"
    inside(run_dir / "imported", "000-c4.json", "run.json imported.files")   -> the path, or UnsafeNameError

A name read from another tool's file (a backend, a model) is data: before it is part of a folder's name it is
reduced to a slug of safe characters, so it can never step out of the folder it is made in. A LoRA adapter's
name becomes a folder under /adapters in a container and a flag's value (`NAME=PATH`), so it is checked where it
enters and refused, naming where it came from and the shape accepted. Nothing here knows what a run is.
"""

from __future__ import annotations

import re
from pathlib import Path

SLUG_CHARS = "A-Za-z0-9._+-"  # what a folder name made from data may hold
MAX_SLUG_CHARS = 60
_UNSAFE = re.compile(f"[^{SLUG_CHARS}]+")
ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ADAPTER_SHAPE = "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit, no '..'"


class UnsafeNameError(ValueError):
    """A name that can't be used where it is going; the message names its source and the shape accepted."""


def slug(text: str, fallback: str = "unnamed") -> str:
    """`text` as a folder-name part: runs of other characters become one `-`, no `..`, no leading `.` or `-`,
    at most MAX_SLUG_CHARS; `fallback` when nothing is left."""
    parts = [part for part in _UNSAFE.sub("-", text).split("-") if part.strip(".")]  # `..` alone is no part
    cleaned = re.sub(r"\.{2,}", ".", "-".join(parts)).strip(".-")[:MAX_SLUG_CHARS].strip(".-")
    return cleaned or fallback


def is_adapter_name(name: object) -> bool:
    return isinstance(name, str) and bool(ADAPTER_NAME.match(name)) and ".." not in name


def check_adapter_name(name: object, source: str) -> None:
    """Refuse an adapter name that could leave its folder or break a `NAME=PATH` flag or a mount target."""
    if not is_adapter_name(name):
        raise UnsafeNameError(f"{source}: adapter name {str(name)[:80]!r} is not accepted; expected {ADAPTER_SHAPE}")


def inside(folder: Path, name: str, source: str) -> Path:
    """`folder / name` when `name` is one plain file name inside `folder` (no separator, not `.` or `..`);
    else UnsafeNameError naming `source`."""
    path = folder / name
    if (not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name
            or path.resolve().parent != folder.resolve()):
        raise UnsafeNameError(f"{source}: {name[:80]!r} is not a plain file name inside {folder}")
    return path
