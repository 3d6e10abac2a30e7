"""Who listens on a local port, from Linux's /proc: the proof that the server answering a launch is our child.

A launched engine's port is chosen free, then bound by the child a moment later; a local user who binds it
first would answer the readiness check and receive what bench sends there (an admin's password at sign-in,
prompts), or serve made-up results. So once the port answers, the listening sockets on it
(/proc/net/tcp and tcp6 give their inodes and users) must all belong to processes of the child's session or
its descendants (their /proc/PID/fd links name `socket:[inode]`). Another user's file descriptors can't be
read, which is no matter: only our own processes' sockets need reading to prove a socket is ours.

Where /proc does not say (another system), nothing is claimed either way.
"""

from __future__ import annotations

import pwd
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
LISTEN = "0A"  # the TCP state of a listening socket in /proc/net/tcp
# Addresses whose listener answers a connection to 127.0.0.1 (as hex in /proc/net/tcp*): 127.0.0.1, 0.0.0.0,
# and IPv6's any address and IPv4-mapped 127.0.0.1 (a dual-stack listener).
REACHES_LOOPBACK = {"0100007F", "00000000", "0" * 32, "0000000000000000FFFF00000100007F"}


@dataclass(frozen=True)
class PortHolder:
    """A process listening on the port that is not ours: its pid where /proc lets us see it, and its user."""

    pid: int | None
    user: str

    def describe(self) -> str:
        return f"pid {self.pid}, user {self.user}" if self.pid else f"a process of user {self.user}"


def listeners(port: int) -> dict[int, int]:
    """inode -> uid of every socket listening on `port` that a connection to 127.0.0.1 reaches; empty where
    /proc does not say."""
    found: dict[int, int] = {}
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, _, port_hex = fields[1].partition(":")
            if fields[3] == LISTEN and int(port_hex, 16) == port and address in REACHES_LOOPBACK:
                found[int(fields[9])] = int(fields[7])
    return found


def strangers(port: int, leader: int) -> list[PortHolder]:
    """The processes listening on `port` that are neither `leader` (a session leader: a launched child) nor
    in its session or process group, nor descended from it. Empty when every listener is ours, or when
    /proc shows no listener at all (nothing to judge)."""
    sockets = listeners(port)
    ours = {inode for pid in family(leader) for inode in socket_inodes(pid)}
    foreign = [inode for inode in sockets if inode not in ours]
    return [_holder(inode, sockets[inode]) for inode in foreign]


def holders(port: int) -> list[PortHolder]:
    """Whoever listens on `port` (as far as /proc tells), to name in an error."""
    return [_holder(inode, uid) for inode, uid in listeners(port).items()]


def family(leader: int) -> set[int]:
    """`leader`, the processes of its session or group, and their descendants (a worker that made a session
    of its own included)."""
    parents: dict[int, int] = {}
    members = {leader}
    for stat in PROC.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid, parent, group, session = int(stat.parent.name), int(fields[1]), int(fields[2]), int(fields[3])
        parents[pid] = parent
        if leader in (group, session):
            members.add(pid)
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in members} - members
        members |= children
        grew = bool(children)
    return members


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets `pid` holds open (none where its descriptors can't be read)."""
    found = set()
    try:
        links = list((PROC / str(pid) / "fd").iterdir())
    except OSError:
        return found
    for link in links:
        try:
            target = str(link.readlink())
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


def _holder(inode: int, uid: int) -> PortHolder:
    """Who holds the socket `inode`: its pid where its descriptors can be read (our user's, or as root)."""
    pids = (int(folder.parent.name) for folder in PROC.glob("[0-9]*/fd"))
    return PortHolder(next((pid for pid in pids if inode in socket_inodes(pid)), None), _user(uid))


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
