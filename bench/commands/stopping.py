"""How a command stops: SIGINT, SIGTERM and SIGHUP each end it the way Ctrl-C does, however it was started.

Ctrl-C's path is the one that keeps every record: during a level, asyncio's runner turns SIGINT into a
cancellation of the level; outside one, KeyboardInterrupt unwinds every context manager, which stops the
engines. SIGTERM and SIGHUP take that path by calling whatever handles SIGINT at that moment, rather than
re-sending SIGINT, and SIGINT's own handler is put back at start: a command started in the background of a
non-interactive shell inherits SIGINT ignored, and would otherwise never stop.

The exit code is 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP.
"""

from __future__ import annotations

import signal
from types import FrameType

LIKE_INTERRUPT = (signal.SIGTERM, signal.SIGHUP)

_received: list[int] = []


def install() -> None:
    """From now on, each stop signal raises KeyboardInterrupt (or cancels the running level)."""
    _received.clear()
    # Python's own handler: asyncio's runner takes SIGINT over during a level only from that one.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in LIKE_INTERRUPT:
        signal.signal(sig, _like_interrupt)


def _like_interrupt(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:  # something replaced the handler with SIG_IGN or SIG_DFL: stop anyway
        raise KeyboardInterrupt


def exit_code() -> int:
    """128 + the stop signal received: SIGTERM's or SIGHUP's when one came (they are noted), else SIGINT's."""
    return 128 + (_received[0] if _received else int(signal.SIGINT))
