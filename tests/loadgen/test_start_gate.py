"""The start gate: at most N requests start per event-loop pass, the rest in arrival order after."""

from __future__ import annotations

import asyncio
from collections import Counter

from loadgen.runner import StartGate


async def _start_all(gate: StartGate, num_users: int, cancel: set[int] = frozenset()) -> list[tuple[int, int]]:
    """Each user waits its turn; returns (user, loop pass it started in), in the order they started."""
    loop = asyncio.get_running_loop()
    passes = 0
    running = True

    def count_pass() -> None:
        nonlocal passes
        passes += 1
        if running:
            loop.call_soon(count_pass)

    started: list[tuple[int, int]] = []

    async def user(index: int) -> None:
        await gate.turn()
        started.append((index, passes))

    loop.call_soon(count_pass)
    tasks = [asyncio.create_task(user(i)) for i in range(num_users)]
    await asyncio.sleep(0)
    for index in cancel:
        tasks[index].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    running = False
    return started


def test_at_most_n_start_per_pass_in_the_order_they_asked() -> None:
    started = asyncio.run(_start_all(StartGate(per_pass=3), 10))
    assert [user for user, _ in started] == list(range(10))
    per_pass = Counter(loop_pass for _, loop_pass in started)
    assert max(per_pass.values()) == 3 and len(per_pass) == 4


def test_a_user_cancelled_while_waiting_gives_its_turn_to_the_next() -> None:
    started = asyncio.run(_start_all(StartGate(per_pass=2), 6, cancel={3}))
    assert [user for user, _ in started] == [0, 1, 2, 4, 5]
    assert max(Counter(loop_pass for _, loop_pass in started).values()) == 2
