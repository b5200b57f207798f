"""The simulator's site batch read through loopback devices by the real facility collectors.

`SimulatedSiteDevices` (fleetsim/peers/sim_bridge.py) serves the model as SNMP
PDUs, Redfish CDUs and Modbus meters and polls them with the facility poller. A poll
spends up to most of a facility cadence waiting on sockets, so it never runs inside the
tick: it is a task of its own (the blocking poll itself is on a thread), started when the
facility cadence is due, and a poll still running when the next is due is skipped rather
than queued — as a facility agent polls a real site.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agents.collectors.base import Reading
from agents.log import get_logger

log = get_logger("fleetsim")


class SiteDevicePoll:
    def __init__(self, model: Any, interval_s: float) -> None:
        self.model = model
        self.interval_s = interval_s
        self.polls = 0
        self.skipped = 0
        self._devices: Any = None  # SimulatedSiteDevices, imported lazily (pysnmp is heavy)
        self._task: asyncio.Task[None] | None = None
        self._next_ts = float("-inf")

    async def start(self) -> None:
        from fleetsim.peers.sim_bridge import SimulatedSiteDevices

        self._devices = await SimulatedSiteDevices(self.model, self.interval_s).start()
        targets = self._devices.peers.target_tables()
        log.info("simulated site devices started", targets=len(targets), interval_s=self.interval_s)

    def tick(self, ts: float, deliver: Callable[[Reading], None]) -> None:
        """Start a poll if the facility cadence is due; `deliver` gets its reading."""
        if self._devices is None or ts < self._next_ts:
            return
        if self._task is not None and not self._task.done():
            self.skipped += 1  # the devices are slower than their cadence: do not pile up
            return
        # A little slack: tick times jitter by milliseconds and must not skip a poll.
        self._next_ts = ts + self.interval_s - 0.1 * self.interval_s
        self._task = asyncio.create_task(self._poll(ts, deliver))

    async def _poll(self, ts: float, deliver: Callable[[Reading], None]) -> None:
        try:
            reading = await self._devices.reading(ts)
        except Exception as exc:  # a bug in a peer must not stop the virtual nodes
            log.error("site device poll failed", exc_info=True, error=str(exc))
            return
        self.polls += 1
        deliver(reading)

    async def stop(self, timeout_s: float) -> None:
        """Let a poll in flight deliver (within `timeout_s`), then stop the devices."""
        if self._task is not None and not self._task.done():
            await asyncio.wait({self._task}, timeout=timeout_s)
            self._task.cancel()
        if self._devices is not None:
            await self._devices.stop()
            self._devices = None
