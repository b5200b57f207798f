"""Run a coroutine on the caller's stack until it first has to wait.

Acks are sent thousands of times a second and almost never wait (the socket has
room), so a task per ack would be pure overhead; but an agent that stops reading
makes its sends wait, and that wait must not hold up anyone else. `run_eagerly`
gives both: it steps the coroutine at once, and only if the coroutine blocks does
it hand the rest to a task (Python 3.12's eager tasks do the same; we run on 3.11).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def run_eagerly(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Step `coro` now; None if it finished, else the task that finishes it."""
    try:
        waiting_on = coro.send(None)
    except StopIteration:
        return None
    return asyncio.ensure_future(_finish(coro, waiting_on))


async def _finish(coro: Coroutine[Any, Any, None], waiting_on: Any) -> None:
    try:
        while True:
            if waiting_on is None:  # a bare yield (asyncio.sleep(0)): give the loop a turn
                await asyncio.sleep(0)
            else:  # an asyncio future: wait for it; the coroutine reads its result itself
                await asyncio.wait([waiting_on])
            waiting_on = coro.send(None)
    except StopIteration:
        return
    except BaseException:
        coro.close()
        raise
