"""Celery tasks of the fleet app, all declared through `instrumented_task`.

Each task is idempotent (acks_late is on for the whole app): a rollup or
retention run that is redelivered after a worker died redoes nothing twice.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from celery import Task, shared_task
from django.db import InterfaceError, OperationalError

from fleet.storage.partitions import ensure_partitions
from fleet.storage.retention import apply_retention
from fleet.storage.rollups import rollup_all

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

# Transient database trouble ("database is locked" past busy_timeout, a dropped
# PostgreSQL connection) is worth a few quick retries; anything else is a bug.
TRANSIENT = (OperationalError, InterfaceError)


def instrumented_task(
    name: str, *, max_retries: int = 3, retry_backoff_max: int = 30
) -> Callable[[Callable[P, R]], Task[P, R]]:
    """The house task decorator: an explicit name (stable across refactors, and
    what beat and `send_task` use), timing in the log, one retry policy.

    Backoff stays short because these tasks run on a 30 s / 10 min beat: a retry
    later than the next tick is worth nothing.
    """

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
        )(timed)

    return decorate


@instrumented_task("fleet.rollup")
def rollup(now: float | None = None) -> dict[str, int]:
    """1m then 1h rollups of every kind; rows written per tier/kind."""
    written = rollup_all(time.time() if now is None else now)
    return {key: rows for key, rows in written.items() if rows}


@instrumented_task("fleet.retention")
def retention(now: float | None = None) -> dict[str, int]:
    """Delete expired rows of every tier; rows deleted per table."""
    deleted = apply_retention(time.time() if now is None else now)
    return {table: rows for table, rows in deleted.items() if rows}


@instrumented_task("fleet.partitions")
def partitions(now: float | None = None) -> list[str]:
    """PostgreSQL: make the time partitions each table needs from its retention horizon to
    a day (raw), three days (1m) or two months (1h) ahead; the names made. SQLite: none."""
    return ensure_partitions(time.time() if now is None else now)
