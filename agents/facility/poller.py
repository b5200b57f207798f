"""The facility agent's one collector: polls every target concurrently, then sums the site.

`fleet-agent run` asks its collectors one after another on the tick, so a site
of hundreds of devices is polled here, on a small thread pool: a dead PDU costs
its own timeout on one worker, never the tick. A target still busy when the
tick's time is up is left to finish and its reading is taken on the next tick.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from agents.collectors.base import Reading
from agents.facility.collector import TargetCollector
from agents.facility.site import SitePower, site_power
from agents.protocol.metrics import ENTITY_KEYS

OK_STATES = ("ok", "degraded", "never_polled")
_KEYS = frozenset({"ts", *(key for keys in ENTITY_KEYS.values() for key in keys)})


class FacilityPoller:
    """A `Collector` over many facility targets, each on its own cadence."""

    name = "facility"

    def __init__(self, targets: Sequence[TargetCollector], workers: int = 16) -> None:
        self.targets = list(targets)
        self.interval_s = min((t.interval_s for t in self.targets), default=10.0)
        self.workers = max(1, min(workers, len(self.targets)))
        self.site = SitePower()
        self._pool: ThreadPoolExecutor | None = None
        self._last_polled: dict[str, float] = {}
        self._pending: dict[str, Future[Reading]] = {}
        self._reported: dict[str, str] = {}
        # Fields of targets polled less often than the tick, with the slowest such cadence:
        # the agent declares them (`cadence.fields_s`) so the server waits for their pace.
        self.fields_s: dict[str, float] = {}

    def setup(self) -> None:
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="facility")
        for target in self.targets:
            target.setup()

    def collect(self, now: float) -> Reading:
        pool = self._pool
        if pool is None:
            self.setup()
            pool = self._pool
        assert pool is not None
        for target in self._due(now):
            self._last_polled[target.name] = now
            self._pending[target.name] = pool.submit(target.collect, now)
        # Wait for this tick's polls, but never longer than most of a tick.
        concurrent.futures.wait(list(self._pending.values()), timeout=0.8 * self.interval_s)
        reading = Reading()
        cadences = {t.name: t.interval_s for t in self.targets}
        for name, future in list(self._pending.items()):
            if future.done():
                del self._pending[name]
                polled = future.result()
                self._note_slow_fields(polled, cadences[name])
                reading.merge(polled)
        self.site = site_power(self.targets, now)
        self._add_site_samples(reading, now)
        reading.samples = {kind: _merged(kind, rows) for kind, rows in reading.samples.items()}
        reading.events.extend(self._status_events(now))
        return reading

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        for target in self.targets:
            target.close()

    def _note_slow_fields(self, reading: Reading, interval_s: float) -> None:
        if interval_s <= self.interval_s * 1.25:  # polled every tick (within the slack)
            return
        for samples in reading.samples.values():
            for sample in samples:
                for name in sample:
                    if name not in _KEYS and self.fields_s.get(name, 0.0) < interval_s:
                        self.fields_s[name] = interval_s

    def _due(self, now: float) -> list[TargetCollector]:
        slack = 0.25 * self.interval_s  # ticks jitter; do not skip a target for 10 ms
        return [
            t
            for t in self.targets
            if t.name not in self._pending
            and now - self._last_polled.get(t.name, float("-inf")) >= t.interval_s - slack
        ]

    def _add_site_samples(self, reading: Reading, now: float) -> None:
        if self.site.facility:
            reading.add("facility", {"ts": now, **self.site.facility})
        for rack, values in self.site.racks.items():
            reading.add("rack", {"ts": now, "rack": rack, **values})

    def _status_events(self, now: float) -> list[dict[str, Any]]:
        """One event when a target starts failing or changes failure, one when it recovers."""
        events: list[dict[str, Any]] = []
        for target in self.targets:
            state, detail = target.status.state, target.status.detail
            key = "" if state in OK_STATES else f"{state}: {detail}"
            if self._reported.get(target.name, "") == key:
                continue
            previous = self._reported.get(target.name, "")
            self._reported[target.name] = key
            label = f"facility target {target.target.name}"
            text = f"{label}: {key}" if key else f"{label}: answering again"
            if key or previous:
                kind = "collector_error" if key else "note"
                events.append({"ts": round(time.time(), 3), "kind": kind, "detail": text[:500]})
        return events


def _merged(kind: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One sample per entity per tick (a rack's temperatures and its power sum are one row)."""
    keys = ENTITY_KEYS.get(kind, ())  # type: ignore[call-overload]
    if not keys:
        return rows
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        ident = tuple(row.get(k) for k in keys)
        merged.setdefault(ident, {}).update(row)
    return list(merged.values())
