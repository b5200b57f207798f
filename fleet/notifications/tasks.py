"""Celery tasks that send notifications. They carry only a delivery id: what to send,
and whether it is due and whose it is, lives in the database (fleet.notifications.delivery).

Never sleep in a worker: a 429's Retry-After, a backoff, or a rate slot that is not
yet free all become a retry with a `countdown`. Tasks are idempotent (acks_late is on
app-wide): a redelivered or duplicated task finds the delivery claimed or done.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from celery import Task, shared_task
from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone

from fleet.notifications.delivery import attempt, create_deliveries, create_test_delivery
from fleet.notifications.models import Delivery, Route
from fleet.notifications.notice import Notice
from fleet.notifications.schedule import (
    SWEEP_EVERY_S,
    SWEEP_EXPIRES_S,
    WEEKLY_CHECK_EVERY_S,
    WEEKLY_CHECK_EXPIRES_S,
)
from fleet.notifications.slack import SlackWebhook
from fleet.notifications.weekly import send_weekly_reports
from fleet.tasks import time_limits

__all__ = (
    "SWEEP_EVERY_S",
    "SWEEP_EXPIRES_S",
    "WEEKLY_CHECK_EVERY_S",
    "WEEKLY_CHECK_EXPIRES_S",
    "deliver",
    "send_notice",
    "send_test",
    "sweep",
    "weekly_report",
)

log = logging.getLogger(__name__)

# A pending delivery this far past due has lost its task (broker outage, purge).
OVERDUE = timedelta(seconds=60)


@shared_task(
    bind=True,
    name="notifications.deliver",
    acks_late=True,
    # Retries are how the task waits (429, backoff, rate slot); the database bounds them.
    max_retries=None,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    retry_backoff_max=60,
    retry_jitter=True,
    **time_limits("notifications.deliver"),
)
def deliver(self: Task[[int], str], delivery_id: int) -> str:
    """Try one delivery if it is due; re-queue itself for the next try."""
    step = attempt(delivery_id, SlackWebhook())
    queue = _own_queue(self)
    for follow_up in step.follow_ups:
        enqueue(follow_up, queue=queue)
    if step.retry_in is not None:
        if queue:
            raise self.retry(countdown=step.retry_in, queue=queue)
        raise self.retry(countdown=step.retry_in)
    return "done"


@shared_task(
    name="notifications.sweep",
    acks_late=True,
    expires=SWEEP_EXPIRES_S,
    **time_limits("notifications.sweep"),
)
def sweep() -> int:
    """Re-queue deliveries whose task was lost: pending and long overdue, or claimed by a
    sender that died (lease over). Duplicates are harmless: the claim decides."""
    now = timezone.now()
    lost = Delivery.objects.filter(
        state=Delivery.PENDING, due_at__lt=now - OVERDUE
    ) | Delivery.objects.filter(state=Delivery.SENDING, lease_until__lt=now)
    ids = list(lost.values_list("pk", flat=True)[:1000])
    for delivery_id in ids:
        enqueue(delivery_id)
    return len(ids)


@shared_task(
    name="notifications.weekly_report",
    acks_late=True,
    expires=WEEKLY_CHECK_EXPIRES_S,
    **time_limits("notifications.weekly_report"),
)
def weekly_report() -> int:
    """Post last week's report of each site that has not had it yet; how many deliveries."""
    return len(send_weekly_reports(time.time(), _enqueue_on_commit))


def send_notice(notice: Notice) -> list[Delivery]:
    """Write a delivery per matching route, then queue them once the rows are committed
    (a task must never run before its row exists)."""
    with transaction.atomic():
        deliveries = create_deliveries(notice)
        for delivery in deliveries:
            _enqueue_on_commit(delivery.pk)
    return deliveries


def send_test(route: Route) -> Delivery:
    """The admin's 'send a test message' action."""
    with transaction.atomic():
        delivery = create_test_delivery(route)
        _enqueue_on_commit(delivery.pk)
    return delivery


def enqueue(delivery_id: int, *, queue: str | None = None, countdown: float = 0) -> None:
    if queue:
        deliver.apply_async((delivery_id,), countdown=countdown, queue=queue)
    else:
        deliver.apply_async((delivery_id,), countdown=countdown)


def _enqueue_on_commit(delivery_id: int) -> None:
    transaction.on_commit(lambda: enqueue(delivery_id))


def _own_queue(task: Task[[int], str]) -> str | None:
    """The queue this task came from, so its retries and follow-ups stay on it."""
    info = task.request.delivery_info or {}
    key = info.get("routing_key")
    return str(key) if key else None
