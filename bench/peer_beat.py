"""Celery beat for bench/peer.py: only the storage's own upkeep of fleetwatch/celery.py's
schedule (the rollup every 30 s, packing sealed raw spans every 60 s, partitions and
retention every 600 s), the entries as
they are. Alert rules, ledgers, forecasts and health are dropped: Prometheus in the same
bench evaluates no rules, so neither side pays for rules.

    celery -A fleetwatch beat -S bench.peer_beat:StorageOnly …
"""

from __future__ import annotations

from celery.beat import PersistentScheduler

STORAGE_ENTRIES = ("rollup", "pack", "partitions", "retention")


class StorageOnly(PersistentScheduler):  # type: ignore[misc]
    def setup_schedule(self) -> None:
        schedule = self.app.conf.beat_schedule
        for name in [n for n in schedule if n not in STORAGE_ENTRIES]:
            del schedule[name]
        super().setup_schedule()
        for name in [n for n in self.schedule if n not in STORAGE_ENTRIES]:
            del self.schedule[name]
        self.sync()
