"""The notes beside each level in the summary table."""

from __future__ import annotations

from bench.commands.display import _note
from loadgen.metrics import summarize
from loadgen.types import RequestRecord


def _request(user: int, end_s: float, send_s: float = 0.0) -> RequestRecord:
    """Ten tokens, the first 0.1 s after sending; chunk times are relative to the send."""
    times = [0.1 + (end_s - send_s - 0.1) * k / 9 for k in range(10)]
    return RequestRecord(run_id="r", engine="e", level="c4", request_id=user, send_s=send_s, dispatch_s=send_s,
                         user=user, chunk_times_s=times, chunk_tokens=[1] * 10, end_s=end_s, output_tokens=10, ok=True)


def test_a_level_with_fewer_completions_than_users_says_to_lengthen_it() -> None:
    # Four users, one request each, ending 1 s apart: the steady window closes when the first user stops.
    short = summarize([_request(user, end_s=1.0 + user) for user in range(4)])
    assert "lengthen --duration" in _note(short)
    # Each user finishing several requests inside the window: no such note.
    steady = summarize([_request(user, end_s=0.5 * k, send_s=0.5 * (k - 1)) for user in range(4) for k in range(1, 7)])
    assert "lengthen --duration" not in _note(steady)
