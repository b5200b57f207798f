"""Celery tasks of the fleet app, all declared through `instrumented_task`.

Each task is idempotent (acks_late is on for the whole app): a rollup or
retention run that is redelivered after a worker died redoes nothing twice.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import ParamSpec, TypedDict, TypeVar

from celery import Task, shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from fleet.read.forecast_now import refresh_forecasts
from fleet.read.health_now import refresh_health
from fleet.remote_write.ship import ship_pass
from fleet.storage import ledger as ledger_keeper
from fleet.storage.packed import pack_sealed
from fleet.storage.partitions import ensure_partitions
from fleet.storage.retention import apply_retention
from fleet.storage.rollups import rollup_all

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

# Transient database trouble ("database is locked" past busy_timeout, a dropped
# PostgreSQL connection) is worth a few quick retries; anything else is a bug.
TRANSIENT = (OperationalError, InterfaceError)

# Every task's time limits, seconds: (soft, hard). At the soft limit the task gets
# SoftTimeLimitExceeded (its transaction rolls back; logged as failed, not retried); at
# the hard limit a prefork worker kills its child and starts another — so one stuck task
# frees its worker slot instead of starving what queues behind it. Only the prefork pool
# enforces them: a `--pool solo` worker (the tests' workers) enforces neither.
# docs/operations.md, "Alerting", lists them.
TIME_LIMITS: dict[str, tuple[int, int]] = {
    # A pass takes well under a second at 10,000 GPUs (bench/rules.py); one running three
    # 10 s ticks is stuck (the watchdog already calls it stopped), and the next tick redoes it.
    "alerts.evaluate": (30, 45),
    # A few queries, every 30 s: cut before the next one is due.
    "alerts.watchdog": (20, 28),
    # Each query to a Prometheus may take its 10 s timeout (QUERY_TIMEOUT_S), a few run in
    # turn; past two minutes the source is as good as down, and the next pull tries again.
    "prometheus.pull": (120, 150),
    # One webhook POST (10 s timeout) and its bookkeeping; a retry is a new task.
    "notifications.deliver": (45, 60),
    # One query and up to 1,000 enqueues, every 60 s.
    "notifications.sweep": (40, 55),
    # Once a week per site, a week's ledger on the hourly tier (seconds at 10,000 GPUs).
    "notifications.weekly_report": (300, 360),
    # Bulk storage work that may take minutes on a backlog; each chunk commits on its own
    # and claims its state row, so a rollup cut short resumes at the next tick.
    "fleet.rollup": (600, 660),
    # Closes the energy ledger's hours; a run stops taking new hours after
    # ledger_keeper.RUN_BUDGET_S (240 s) and the next minute's run goes on.
    "fleet.ledger": (600, 660),
    "fleet.retention": (600, 660),
    # Every site's forecasts, 3.6-5.4 s for a 10,000-GPU site (bench/foresight.py), once a minute.
    # A stored result is served for 3 minutes (forecast_now.STALE_S): a run past two is cut,
    # keeping the sites it stored, and the next tick starts again.
    "fleet.forecasts": (120, 150),
    # Every site's GPU health records, ~1.2 s for a 10,000-GPU site (bench/foresight.py),
    # once a minute; stale after 3 minutes as the forecasts are (computed.STALE_S).
    "fleet.health": (120, 150),
    "fleet.partitions": (120, 180),
    # Packs the sealed raw spans (seconds per span at 10,000 GPUs); each span commits on
    # its own, so a pass cut short leaves the rest to the next.
    "fleet.pack": (600, 660),
    # One shipper pass stops taking rows after PASS_BUDGET_S (20 s); its last request may
    # take its timeout (FLEETWATCH_REMOTE_WRITE_TIMEOUT_S, 30 s) more. The next tick goes on.
    "fleet.remote_write": (60, 75),
}


class TimeLimits(TypedDict):
    soft_time_limit: int
    time_limit: int


def time_limits(name: str) -> TimeLimits:
    """Celery's options for the limits of task `name` (a KeyError: it has none yet)."""
    soft, hard = TIME_LIMITS[name]
    return {"soft_time_limit": soft, "time_limit": hard}


def instrumented_task(
    name: str, *, max_retries: int = 3, retry_backoff_max: int = 30
) -> Callable[[Callable[P, R]], Task[P, R]]:
    """The house task decorator: an explicit name (stable across refactors, and
    what beat and `send_task` use), timing in the log, one retry policy, and the task's
    time limits from `TIME_LIMITS` (a task without an entry cannot be declared).

    Backoff stays short because these tasks run on a 30 s / 10 min beat: a retry
    later than the next tick is worth nothing.
    """

    limits = time_limits(name)

    def decorate(func: Callable[P, R]) -> Task[P, R]:
        @functools.wraps(func)
        def timed(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.monotonic()
            try:
                result = func(*args, **kwargs)
            except BaseException as exc:
                log.warning(
                    "task %s failed after %.3f s: %r", name, time.monotonic() - started, exc
                )
                raise
            log.info("task %s done in %.3f s: %s", name, time.monotonic() - started, result)
            return result

        return shared_task(
            name=name,
            autoretry_for=TRANSIENT,
            max_retries=max_retries,
            retry_backoff=True,
            retry_backoff_max=retry_backoff_max,
            retry_jitter=True,
            acks_late=True,
            **limits,
        )(timed)

    return decorate


@instrumented_task("fleet.rollup")
def rollup(now: float | None = None) -> dict[str, int]:
    """1m then 1h rollups of every kind; rows written per tier/kind."""
    written = rollup_all(time.time() if now is None else now)
    return {key: rows for key, rows in written.items() if rows}


@instrumented_task("fleet.ledger")
def ledger(now: float | None = None) -> int:
    """The energy ledger's stored hours and days brought up to date; hours written."""
    return ledger_keeper.keep(time.time() if now is None else now)


@instrumented_task("fleet.forecasts")
def forecasts(now: float | None = None) -> int:
    """Every site's time-to-limit forecasts as of this minute, stored where pages and rules
    read them (fleet/read/forecast_now.py); sites done."""
    return refresh_forecasts(time.time() if now is None else now)


@instrumented_task("fleet.health")
def gpu_health(now: float | None = None) -> int:
    """Every site's GPU health states as of this minute, stored where the health-state rules
    read them (fleet/read/health_now.py); sites done."""
    return refresh_health(time.time() if now is None else now)


@instrumented_task("fleet.retention")
def retention(now: float | None = None) -> dict[str, int]:
    """Delete expired rows of every tier; rows deleted per table."""
    deleted = apply_retention(time.time() if now is None else now)
    return {table: rows for table, rows in deleted.items() if rows}


@instrumented_task("fleet.pack")
def pack() -> dict[str, int]:
    """Pack every sealed raw span into its packed rows and free the raw rows' disk
    (fleet/storage/packed.py; nothing when FLEETWATCH_RAW_PACK_MINUTES=0); rows per kind."""
    return {kind: rows for kind, rows in pack_sealed().items() if rows}


@instrumented_task("fleet.partitions")
def partitions(now: float | None = None) -> list[str]:
    """PostgreSQL: make the time partitions each table needs from its retention horizon to
    a day (raw), three days (1m) or two months (1h) ahead; the names made. SQLite: none."""
    return ensure_partitions(time.time() if now is None else now)


@instrumented_task("fleet.remote_write", max_retries=1, retry_backoff_max=5)
def remote_write(now: float | None = None) -> dict[str, object]:
    """One remote-write pass (fleet/remote_write/ship.py): each kind's settled raw rows past
    its cursor to the receiver. A receiver that is down is backed off, not raised."""
    result = ship_pass(time.time() if now is None else now, settings.REMOTE_WRITE)
    return {
        "shipped": result.shipped,
        "dropped": result.dropped,
        "requests": result.requests,
        "failed": result.failed,
        "backing_off": result.backing_off,
        "overlapped": result.overlapped,
    }
