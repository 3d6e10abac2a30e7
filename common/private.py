"""Folders the toolkit writes into are their owner's only, unless the user's umask shares with the group.

Run directories hold engine logs, commands and telemetry from a shared GPU host; the default umask (022)
would make them readable by every local user. A folder is made 0700, or, where the umask leaves the group
its write bit (002, 007: a choice people make to share work with their group), 0770 less the umask.
"""

from __future__ import annotations

import os
from pathlib import Path

OWNER_ONLY = 0o700
WITH_GROUP = 0o770


def current_umask() -> int:
    """The process's umask, read without changing it where the kernel says it (Linux: /proc/self/status)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def folder_mode() -> int:
    """The mode a new folder gets: its owner's only, or shared with the group where the umask says so."""
    umask = current_umask()
    return (WITH_GROUP & ~umask) if not umask & 0o020 else OWNER_ONLY


def make_private_dir(path: Path, exist_ok: bool = False) -> Path:
    """`path` made (its missing parents with the default mode) with `folder_mode()`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir(mode=folder_mode(), exist_ok=exist_ok)
    return path


def describe_access(path: Path) -> str:
    """Who may read `path`, in words: what a user sharing a run directory needs to know."""
    mode = path.stat().st_mode & 0o777
    if mode & 0o007:
        return f"readable by every user of this machine ({oct(mode)})"
    if mode & 0o070:
        return f"shared with its group, as the umask asks ({oct(mode)})"
    return f"private to its owner ({oct(mode)}; share it with: chmod -R g+rX {path})"
