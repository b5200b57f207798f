"""The Celery app: config from Django settings (`CELERY_*`), tasks from each app's
`tasks.py`, and the beat schedule.

Run exactly one beat (`celery -A fleetwatch beat`): a second one would send every
tick twice. Two overlapping rollups are still safe (each chunk claims its state
row), just wasted work. Workers: `celery -A fleetwatch worker`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Celery
from django.conf import settings
from kombu import Queue

from fleetwatch import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleetwatch.settings")
broker.register()  # the embedded tier's filesystem broker, with atomic writes

app = Celery("fleetwatch")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Each tick expires before the next one is due: after a worker outage the queue
# holds at most one useful rollup, not an hour of them (each would redo nothing).
app.conf.beat_schedule = {
    "rollup": {"task": "fleet.rollup", "schedule": 30.0, "options": {"expires": 25}},
    "retention": {"task": "fleet.retention", "schedule": 600.0, "options": {"expires": 550}},
    # Re-queues Slack deliveries whose task was lost (a broker restart): nothing is dropped.
    "notifications-sweep": {
        "task": "notifications.sweep",
        "schedule": 60.0,
        "options": {"expires": 50},
    },
}
app.conf.task_routes = {"alerts.evaluate": {"queue": "rules"}}
app.conf.task_queues = (Queue("celery"), Queue("rules"))


@app.on_after_configure.connect
def schedule_alert_evaluation(sender: Celery, **kwargs: Any) -> None:
    """Alert rules every FLEETWATCH_ALERT_EVAL_S (10 s), on their own queue ("rules") so a
    dedicated worker (`-Q rules`) keeps them clear of a long rollup; a worker started
    without `-Q` consumes both queues. Added here, once Django's settings are loaded."""
    every = float(settings.ALERT_EVAL_S)
    sender.conf.beat_schedule["alerts-evaluate"] = {
        "task": "alerts.evaluate",
        "schedule": every,
        "options": {"expires": every * 0.9},
    }
    # The alert pipeline watching itself (fleet/alerts/watchdog.py): on the default queue,
    # so a stuck "rules" worker is noticed by another.
    watch = float(settings.ALERT_WATCHDOG_S)
    sender.conf.beat_schedule["alerts-watchdog"] = {
        "task": "alerts.watchdog",
        "schedule": watch,
        "options": {"expires": watch * 0.8},
    }
    # Prometheus sources (fleet/prometheus/pull.py): beside the rules, on their queue.
    # (fleet.prometheus is not an app, so autodiscovery does not find its tasks module.)
    sender.conf.include = (*sender.conf.include, "fleet.prometheus.tasks")
    sender.conf.task_routes["prometheus.pull"] = {"queue": "rules"}
    pull = float(settings.PROMETHEUS_PULL_S)
    sender.conf.beat_schedule["prometheus-pull"] = {
        "task": "prometheus.pull",
        "schedule": pull,
        "options": {"expires": pull * 0.9},
    }


@app.on_after_configure.connect
def ensure_queue_folders(sender: Celery, **kwargs: Any) -> None:
    """kombu's filesystem transport expects its folders to exist (producer and worker)."""
    if not str(sender.conf.broker_url or "").startswith("filesystem:"):
        return
    options = sender.conf.broker_transport_options or {}
    for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
        folder = options.get(key)
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
