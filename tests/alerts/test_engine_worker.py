"""A REAL Celery worker (a `celery worker --pool solo` subprocess, over the broker of each
tier) runs `alerts.evaluate` sent by name, and an instance fires in its database."""

from __future__ import annotations

import time

from fleet.alerts.models import AlertInstance, AlertRule
from tests.fleet import test_celery_worker

worker = test_celery_worker.worker  # the same module-scoped worker fixture
Worker = test_celery_worker.Worker


def test_worker_fires_an_instance_when_sent_alerts_evaluate(worker: Worker) -> None:
    alias = worker.db.alias
    AlertRule.objects.using(alias).update(enabled=False)
    AlertRule.objects.using(alias).create(
        key="inlet-hot",
        name="Inlet hot",
        scope="node",
        signal="temp_inlet_c",
        comparison="gt",
        threshold=30.0,
        severity="warning",
        summary="{node} inlet {value:.1f} °C",
    )
    now = time.time()
    worker.db.insert(
        "fw_node_latest",
        ("node_id", "ts", "temp_inlet_c", "temp_inlet_c_ts"),
        [(41, now, 38.5, now)],
    )

    worker.send("alerts.evaluate")

    firing = AlertInstance.objects.using(alias).filter(entity="41", state="firing")
    worker.wait_for("fire an instance", firing.exists)
    assert firing.get().value == 38.5
