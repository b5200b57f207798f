"""Every Celery task carries a soft and a hard time limit suited to its job, from the one
table in fleet/tasks.py: a stuck task is cut off (by a prefork worker) instead of holding
its worker slot while evaluations, deliveries and the watchdog queue behind it."""

from __future__ import annotations

import importlib

from celery import Task

from fleet.tasks import TIME_LIMITS
from fleetwatch.celery import TASK_QUEUES
from fleetwatch.celery import app as fleet_app
from fleetwatch.demo import celery_workers

TASK_MODULES = (
    "fleet.tasks",
    "fleet.alerts.tasks",
    "fleet.ingest.prometheus.tasks",
    "fleet.notifications.tasks",
)


def registered() -> dict[str, Task]:  # type: ignore[type-arg]
    for module in TASK_MODULES:
        importlib.import_module(module)
    fleet_app.loader.import_default_modules()
    return {name: task for name, task in fleet_app.tasks.items() if not name.startswith("celery.")}


def test_every_registered_task_has_a_soft_limit_under_its_hard_limit() -> None:
    tasks = registered()
    assert set(tasks) == set(TIME_LIMITS), "a task without limits, or limits without a task"
    for name, task in tasks.items():
        soft, hard = task.soft_time_limit, task.time_limit
        assert soft is not None and hard is not None, name
        assert (soft, hard) == TIME_LIMITS[name], name
        assert 0 < soft < hard, name


def test_every_routed_task_has_limits() -> None:
    assert set(TASK_QUEUES) <= set(TIME_LIMITS)


def test_the_alert_pipeline_is_cut_before_it_falls_far_behind() -> None:
    # evaluation every 10 s: a pass stuck for three ticks is cut; the watchdog runs every
    # 30 s and must be done before its next run
    assert TIME_LIMITS["alerts.evaluate"][1] <= 60
    assert TIME_LIMITS["alerts.watchdog"][1] < 30
    assert TIME_LIMITS["notifications.deliver"][1] <= 60


def test_every_demo_worker_runs_a_pool_that_enforces_the_limits() -> None:
    for name, argv in celery_workers().items():
        pool = argv[argv.index("--pool") + 1] if "--pool" in argv else "prefork"
        assert pool == "prefork", name
