"""The tick: a fixed-rate clock that never drifts and never queues, and the slow lane beside it.

Ticks fall on a fixed grid (start + k·interval). When the work of one tick overruns the
next deadline, the missed ticks are skipped and counted (`skipped`, reported as
`agent.ticks_skipped`) instead of being run late back to back: a late sample is worth less
than the next on-time one, and catching up would only make the next tick late too.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from agents.collectors.base import Reading, SlowRead
from agents.protocol.metrics import ENTITY_KEYS


class Ticker:
    def __init__(
        self,
        interval_s: float,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval must be positive")
        self.interval_s = interval_s
        self.skipped = 0
        # Injectable so that tests can drive the schedule with a clock of their own.
        self._clock = clock
        self._sleep = sleep or asyncio.sleep
        self._wall = wall

    async def ticks(self) -> AsyncIterator[float]:
        """Yield the wall-clock time of each tick."""
        clock = self._clock or asyncio.get_running_loop().time
        next_at = clock()
        while True:
            delay = next_at - clock()
            if delay > 0:
                await self._sleep(delay)
            yield self._wall()
            next_at += self.interval_s
            behind = clock() - next_at
            if behind > 0:
                missed = int(behind // self.interval_s) + 1
                self.skipped += missed
                next_at += missed * self.interval_s


class SlowLane:
    """Runs `SlowRead`s on one thread of their own, so the tick never waits for them.

    Each tick, `submit_due(tick)` hands the reads that are due to the lane's thread; a read
    whose previous run has not finished is skipped (counted in `skipped`), never queued
    twice. `harvest()` returns the readings finished since the last call, for the tick to
    merge into its samples.
    """

    def __init__(self, reads: list[SlowRead]) -> None:
        self.reads = reads
        self.skipped = 0
        self.failures: dict[str, str] = {}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slow-lane")
        self._running: dict[str, Future[Reading]] = {}
        self._done: list[Reading] = []
        self._lock = threading.Lock()

    def submit_due(self, tick: int, now: float) -> list[str]:
        submitted = []
        for read in self.reads:
            if (tick - read.offset) % read.every_ticks != 0:
                continue
            previous = self._running.get(read.name)
            if previous is not None and not previous.done():
                self.skipped += 1
                continue
            future = self._executor.submit(read.read, now)
            future.add_done_callback(functools.partial(self._finished, read.name))
            self._running[read.name] = future
            submitted.append(read.name)
        return submitted

    def harvest(self) -> list[Reading]:
        with self._lock:
            done, self._done = self._done, []
        return done

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every submitted read has finished (for `check` and tests)."""
        _, pending = wait(list(self._running.values()), timeout=timeout_s)
        return not pending

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _finished(self, name: str, future: Future[Reading]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            # Reported by the runner as a collector_error; the read runs again next cycle.
            self.failures[name] = f"{type(error).__name__}: {error}"
            return
        with self._lock:
            self._done.append(future.result())


def merge_slow(into: Reading, slow: Reading) -> None:
    """Fold a slow reading into the tick's: fields join the sample of the same entity.

    A slow GPU read becomes part of that GPU's sample at this tick's timestamp (two samples
    with one (ts, gpu) key would contradict each other). A slow read for a GPU that has no
    sample this tick (it was lost) is dropped.
    """
    for kind, samples in slow.samples.items():
        keys = ENTITY_KEYS.get(kind, ())
        current = into.samples.setdefault(kind, [])
        by_entity = {tuple(s.get(k) for k in keys): s for s in current}
        for sample in samples:
            target = by_entity.get(tuple(sample.get(k) for k in keys))
            if target is None:
                if kind != "gpu":
                    current.append(sample)
                continue
            for name, value in sample.items():
                if name != "ts":
                    target[name] = value
    into.gpu_info.extend(slow.gpu_info)
    into.node_info.update(slow.node_info)
    into.events.extend(slow.events)
    into.workloads.extend(slow.workloads)
    into.fabric.extend(slow.fabric)
