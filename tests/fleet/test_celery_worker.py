"""A real Celery worker (`celery -A fleetwatch worker --pool solo`, a subprocess)
runs the storage tasks sent to it by name: over kombu's filesystem transport and
a SQLite file in the embedded tier, over Redis and PostgreSQL in the services
tier. No eager mode: the message crosses a real broker to another process."""

from __future__ import annotations

import time
from typing import Any

from fleet.storage.partitions import ensure_partitions
from fleetwatch.celery import app as fleet_app
from tests.support import celery_workers
from tests.support.celery_workers import Worker

worker = celery_workers.worker_on_own_queue  # shared by the module's tests


def test_worker_rolls_up_raw_samples_when_sent_fleet_rollup(worker: Worker) -> None:
    now = time.time()
    start = int(now // 60) * 60 - 300  # five complete minutes ago
    rows = [(float(t), 7, g, float(t % 50)) for t in range(start, start + 240, 2) for g in (0, 1)]
    worker.db.insert("fw_gpu_raw", ("ts", "node_id", "gpu", "util_gpu_pct"), rows)

    worker.send("fleet.rollup")

    def minutes() -> list[tuple[Any, ...]]:
        return worker.db.execute(
            "SELECT gpu, count(*), sum(n), max(util_gpu_pct_max) FROM fw_gpu_1m"
            " WHERE node_id = 7 GROUP BY gpu ORDER BY gpu"
        )

    worker.wait_for("roll up", lambda: len(minutes()) == 2 and minutes()[0][1] == 4)
    peak = max(r[3] for r in rows)
    assert minutes() == [(0, 4, 120, peak), (1, 4, 120, peak)]


def test_worker_trims_expired_raw_samples_when_sent_fleet_retention(worker: Worker) -> None:
    now = time.time()
    old = int(now) - 5 * 3600  # past the 3 h raw retention
    recent = int(now) - 600
    rows = [
        (float(t), 8, 3.0) for t in (*range(old, old + 600, 10), *range(recent, recent + 300, 10))
    ]
    # Rows older than a live system would take: on PostgreSQL they need their hour's partition.
    ensure_partitions(old, using=worker.db.alias)
    worker.db.insert("fw_node_raw", ("ts", "node_id", "cpu_pct"), rows)

    def count(table: str) -> int:
        return int(worker.db.execute(f"SELECT count(*) FROM {table} WHERE node_id = 8")[0][0])

    # Retention never drops what was not rolled up, so roll up first. (The
    # filesystem transport does not keep send order: wait rather than queue both.)
    worker.send("fleet.rollup")
    worker.wait_for("roll up", lambda: count("fw_node_1m") >= 10)
    worker.send("fleet.retention")
    # the sixty five-hour-old rows go; the thirty recent ones stay
    worker.wait_for("trim raw rows", lambda: count("fw_node_raw") == 30)


def test_beat_schedule_names_only_registered_tasks() -> None:
    # (registers the tasks, as the worker's autodiscovery does)
    import fleet.alerts.tasks
    import fleet.ingest.prometheus.tasks
    import fleet.notifications.tasks
    import fleet.tasks  # noqa: F401

    # (what is scheduled, and that each tick expires before the next: tests/fleet/test_queues.py)
    scheduled = {entry["task"] for entry in fleet_app.conf.beat_schedule.values()}
    assert scheduled <= set(fleet_app.tasks)
