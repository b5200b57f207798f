"""The Celery app: config from Django settings (`CELERY_*`), tasks from each app's
`tasks.py`, the queues by job and the beat schedule.

Run exactly one beat (`celery -A fleetwatch beat`): a second one would send every
tick twice. Two overlapping rollups are still safe (each chunk claims its state
row), just wasted work.

Queues by job, so neither a long rollup nor a Prometheus that stalls delays an alert or a
Slack message (workers and their commands: docs/operations.md, "Alerting"):

- `rules`: alerts.evaluate, alone — the alert engine's passes;
- `pull`: prometheus.pull — it waits on other servers (up to a query timeout per query
  against a Prometheus that stalls), so it must never sit in front of an evaluation;
- `notifications`: Slack deliveries (their retries and follow-ups stay on the queue they
  came from) and notifications.sweep;
- `maintenance`: fleet.rollup, fleet.ledger, fleet.retention, fleet.partitions, fleet.pack — bulk
  storage work that may take minutes on a backlog — fleet.forecasts (every site's forecasts,
  seconds each, kept off the pages and the rules worker), notifications.weekly_report
  (a week's ledger) and fleet.remote_write (raw samples to a TSDB, when configured);
- `celery` (the default): everything else, alerts.watchdog among them. It is not
  `rules`, so a rules worker that is stuck or dead does not silence the watchdog.

A worker started without `-Q` consumes every queue. Every task has a soft and a hard time
limit, declared with it (fleet/tasks.py `instrumented_task`); a prefork worker enforces
them (the solo pool enforces none).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Celery
from django.conf import settings
from kombu import Queue

from fleet.notifications import schedule as notifications
from fleetwatch import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleetwatch.settings")
broker.register()  # the embedded tier's filesystem broker, with atomic writes

RULES = "rules"
PULL = "pull"
NOTIFICATIONS = "notifications"
MAINTENANCE = "maintenance"
DEFAULT = "celery"
QUEUES = (RULES, PULL, NOTIFICATIONS, MAINTENANCE, DEFAULT)

# By task name, so a task is routed even before its module is imported (or written:
# fleet.partitions); a task not named here goes to DEFAULT.
TASK_QUEUES = {
    "alerts.evaluate": RULES,
    "prometheus.pull": PULL,
    "notifications.deliver": NOTIFICATIONS,
    "notifications.sweep": NOTIFICATIONS,
    "notifications.weekly_report": MAINTENANCE,
    "fleet.rollup": MAINTENANCE,
    "fleet.ledger": MAINTENANCE,
    "fleet.retention": MAINTENANCE,
    "fleet.partitions": MAINTENANCE,
    "fleet.pack": MAINTENANCE,
    "fleet.forecasts": MAINTENANCE,
    "fleet.health": MAINTENANCE,
    "fleet.remote_write": MAINTENANCE,
    "alerts.watchdog": DEFAULT,
}

app = Celery("fleetwatch")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Each tick expires before the next one is due: after a worker outage the queue
# holds at most one useful rollup, not an hour of them (each would redo nothing).
app.conf.beat_schedule = {
    "rollup": {"task": "fleet.rollup", "schedule": 30.0, "options": {"expires": 25}},
    # The energy ledger's hours (fleet/read/ledger_store.py): closed 10 minutes after they
    # end, the open ones computed again every two minutes of new data.
    "ledger": {"task": "fleet.ledger", "schedule": 60.0, "options": {"expires": 55}},
    # Every site's time-to-limit forecasts (fleet/read/forecast_now.py), computed here so no
    # page, live push or rule pass waits seconds for them.
    "forecasts": {"task": "fleet.forecasts", "schedule": 60.0, "options": {"expires": 55}},
    # Every site's GPU health states (fleet/read/health_now.py), for the health-state rules.
    "health": {"task": "fleet.health", "schedule": 60.0, "options": {"expires": 55}},
    "retention": {"task": "fleet.retention", "schedule": 600.0, "options": {"expires": 550}},
    # Partitions ahead of the data (fleet/tasks.py); a missed tick is redone by the next.
    "partitions": {"task": "fleet.partitions", "schedule": 600.0, "options": {"expires": 540}},
    # Sealed raw spans packed (fleet/storage/packed.py) within a minute of the 1-minute
    # rollup passing them; passes at once are safe (each span is checked and locked).
    "pack": {"task": "fleet.pack", "schedule": 60.0, "options": {"expires": 55}},
    # Re-queues Slack deliveries whose task was lost (a broker restart): nothing is dropped.
    "notifications-sweep": {
        "task": "notifications.sweep",
        "schedule": notifications.SWEEP_EVERY_S,
        "options": {"expires": notifications.SWEEP_EXPIRES_S},
    },
    # The weekly report (fleet/notifications/weekly.py): looked for hourly, posted once per
    # site and week; a week's ledger is bulk reading, so it waits behind no alert.
    "weekly-report": {
        "task": "notifications.weekly_report",
        "schedule": notifications.WEEKLY_CHECK_EVERY_S,
        "options": {"expires": notifications.WEEKLY_CHECK_EXPIRES_S},
    },
}
app.conf.task_routes = {name: {"queue": queue} for name, queue in TASK_QUEUES.items()}
# Each queue bound with its own name as routing key: a Queue given none is bound with the
# default key ("celery"), and then every task published to the default exchange is copied
# into every queue (the rules worker ran rollups too, and each tick was evaluated twice).
app.conf.task_queues = tuple(Queue(name, routing_key=name) for name in QUEUES)
app.conf.task_default_queue = DEFAULT


@app.on_after_configure.connect
def schedule_alert_evaluation(sender: Celery, **kwargs: Any) -> None:
    """Alert rules every FLEETWATCH_ALERT_EVAL_S (10 s), on the "rules" queue, which a
    worker of its own keeps clear of a long rollup. Added here, once Django's settings
    are loaded."""
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
    # Prometheus sources (fleet/ingest/prometheus/pull.py), on a queue of their own: a source
    # that stalls holds up the next pull, never an evaluation.
    pull = float(settings.PROMETHEUS_PULL_S)
    sender.conf.beat_schedule["prometheus-pull"] = {
        "task": "prometheus.pull",
        "schedule": pull,
        "options": {"expires": pull * 0.9},
    }


@app.on_after_configure.connect
def schedule_remote_write(sender: Celery, **kwargs: Any) -> None:
    """Remote write (fleet/remote_write/ship.py) every FLEETWATCH_REMOTE_WRITE_S (5 s), only
    when FLEETWATCH_REMOTE_WRITE_URL is set. Each tick expires before the next: behind a long
    rollup on the maintenance worker, the queue holds one pass, not a pile of them."""
    config = settings.REMOTE_WRITE
    if not config.enabled:
        return
    sender.conf.beat_schedule["remote-write"] = {
        "task": "fleet.remote_write",
        "schedule": config.every_s,
        "options": {"expires": config.every_s * 0.9},
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
