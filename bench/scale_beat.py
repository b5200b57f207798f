"""Celery beat for bench/scale.py: fleetwatch/celery.py's schedule unchanged, with the
phase of its first retention tick set.

A fresh beat sends each entry one interval after it starts, so retention (every 600 s)
would first run at the very end of a 10-minute run. This scheduler dates the retention
entry's "last run" back so that its first tick falls FW_SCALE_FIRST_RETENTION_S seconds
after the beat starts, then every 600 s as usual; every other entry keeps its phase.

    celery -A fleetwatch beat -S bench.scale_beat:FirstRetentionAt …
"""

from __future__ import annotations

import datetime as dt
import os

from celery.beat import PersistentScheduler

RETENTION_ENTRY = "retention"


class FirstRetentionAt(PersistentScheduler):  # type: ignore[misc]
    def setup_schedule(self) -> None:
        super().setup_schedule()
        first_s = os.environ.get("FW_SCALE_FIRST_RETENTION_S")
        entry = self.schedule.get(RETENTION_ENTRY)
        if not first_s or entry is None:
            return
        every = float(self.app.conf.beat_schedule[RETENTION_ENTRY]["schedule"])  # seconds
        entry.last_run_at = self.app.now() - dt.timedelta(seconds=every - float(first_s))
        self.sync()
