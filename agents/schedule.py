"""The tick: a fixed-rate clock that never drifts and never queues.

Ticks fall on a fixed grid (start + k·interval). When the work of one tick overruns the
next deadline, the missed ticks are skipped and counted (`skipped`, reported as
`agent.ticks_skipped`) instead of being run late back to back: a late sample is worth less
than the next on-time one, and catching up would only make the next tick late too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator


class Ticker:
    def __init__(self, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError("interval must be positive")
        self.interval_s = interval_s
        self.skipped = 0

    async def ticks(self) -> AsyncIterator[float]:
        """Yield the wall-clock time of each tick."""
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            delay = next_at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            yield time.time()
            next_at += self.interval_s
            behind = loop.time() - next_at
            if behind > 0:
                missed = int(behind // self.interval_s) + 1
                self.skipped += missed
                next_at += missed * self.interval_s
