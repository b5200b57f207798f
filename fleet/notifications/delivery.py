"""Routing and delivery: which routes a notice goes to, the delivery rows written
before anything is sent, and one try at sending (claim, rate slot, POST, outcome).

Every decision is a conditional UPDATE on the database, so any number of workers
can run these functions at once: a delivery is sent by whoever claims it, and a
webhook gets at most one message per SEND_INTERVAL whoever sends it. Celery only
carries "try delivery N now / in X s" (fleet.notifications.tasks).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from fleet.notifications.models import Delivery, DeliveryAttempt, Route, webhook_fingerprint
from fleet.notifications.notice import Notice, Where, severity_rank
from fleet.notifications.slack import Outcome, SendResult, build_message, classify
from fleet.secrets import SecretError

__all__ = (
    "Step",
    "attempt",
    "claim",
    "claim_send_slot",
    "create_deliveries",
    "create_test_delivery",
    "environment_route",
    "report_routes",
    "routes_for",
    "transient_delay",
)

log = logging.getLogger(__name__)

SEND_INTERVAL = timedelta(seconds=1)  # Slack: about one message per second per webhook
LEASE = timedelta(seconds=getattr(settings, "DELIVERY_LEASE_S", 30))  # past the 10 s send timeout
MAX_TRANSIENT = 6  # 5xx / no answer: 2+4+8+16+32 s of backoff (×1–1.5), then failed
MAX_ATTEMPTS = 30  # every try counted, 429s included: nothing retries for ever
DEFAULT_RETRY_AFTER = 5.0  # a 429 without a usable Retry-After header
THREAD_WAIT = timedelta(seconds=2)  # look again for an earlier message of the thread


class Transport(Protocol):
    def send(self, url: str, message: dict[str, object]) -> SendResult: ...


@dataclass
class Step:
    """What the task does next: try again in `retry_in` s (None: finished), and
    queue `follow_ups` (deliveries this try created, e.g. 'route X is failing')."""

    retry_in: float | None = None
    follow_ups: list[int] = field(default_factory=list)


# ---------------------------------------------------------------------------
# routing and the rows written before sending


def environment_route() -> Route | None:
    """The route SLACK_WEBHOOK_URL stands for (kept as a row so it has a rate slot, a
    failing state and a log like any other); None when the setting is empty. The URL
    itself stays in the environment: the row keeps only a keyed hash of it."""
    url = settings.SLACK_WEBHOOK_URL
    if not url:
        return None
    fingerprint = webhook_fingerprint(url)
    route, created = Route.objects.get_or_create(
        from_environment=True,
        defaults={
            "name": "SLACK_WEBHOOK_URL",
            "environment_fingerprint": fingerprint,
            "min_severity": "info",
        },
    )
    if not created and route.environment_fingerprint != fingerprint:
        # a new URL is a new channel: forget the old one's failure
        route.environment_fingerprint, route.state, route.failing_reason = fingerprint, Route.OK, ""
        route.state_since = timezone.now()
        route.save(
            update_fields=["environment_fingerprint", "state", "failing_reason", "state_since"]
        )
    return route


def routes_for(site_id: int | None, severity: str, owner: str = "") -> list[Route]:
    """Enabled routes for this site (or every site) and this owner (or every owner) whose
    minimum severity the notice reaches; the SLACK_WEBHOOK_URL route when none does. A
    route with an owner gets only notices about GPUs that owner holds (`owner` given)."""
    candidates = Route.objects.filter(enabled=True, from_environment=False).filter(
        Q(site__isnull=True) | Q(site_id=site_id)
    )
    candidates = (
        candidates.filter(Q(owner="") | Q(owner=owner)) if owner else candidates.filter(owner="")
    )
    rank = severity_rank(severity)
    matched = [r for r in candidates if rank >= severity_rank(r.min_severity)]
    if matched:
        return matched
    return _default_routes()


def report_routes(site_id: int) -> list[Route]:
    """Where a site's weekly report goes: every enabled route of the site or of every site
    that takes every owner's alerts (a team's route gets its own alerts, not the site's
    figures), whatever its minimum severity; the SLACK_WEBHOOK_URL route when none does."""
    routes = list(
        Route.objects.filter(enabled=True, from_environment=False, owner="").filter(
            Q(site__isnull=True) | Q(site_id=site_id)
        )
    )
    return routes or _default_routes()


def _default_routes() -> list[Route]:
    default = environment_route()
    return [default] if default is not None and default.enabled else []


def create_deliveries(notice: Notice, routes: list[Route] | None = None) -> list[Delivery]:
    """One pending row per route (the notice's by routes_for, unless given), written
    before any send, so a crash loses nothing."""
    message = build_message(notice)
    if routes is None:
        routes = routes_for(notice.site_id, notice.severity, notice.owner)
    return [_new_delivery(route, notice, message) for route in routes]


def create_test_delivery(route: Route) -> Delivery:
    notice = Notice(kind="test", severity="info", title=f"route “{route.name}”")
    return _new_delivery(route, notice, build_message(notice))


def _new_delivery(route: Route, notice: Notice, message: dict[str, object]) -> Delivery:
    return Delivery.objects.create(
        route=route,
        thread=notice.thread[:64],
        kind=notice.kind,
        severity=notice.severity,
        title=notice.title[:300],
        message=message,
    )


# ---------------------------------------------------------------------------
# claims


def claim(delivery_id: int, now: datetime) -> bool:
    """Take a due delivery for sending; False when another sender has it, it is done,
    or it is not due. A SENDING row whose lease ran out (its sender died) is due again."""
    due = Q(state=Delivery.PENDING, due_at__lte=now) | Q(
        state=Delivery.SENDING, lease_until__lt=now
    )
    taken = Delivery.objects.filter(due, pk=delivery_id).update(
        state=Delivery.SENDING, lease_until=now + LEASE
    )
    return taken == 1


def claim_send_slot(route_id: int, now: datetime) -> float:
    """The route's next send slot: 0.0 when it is ours, else the seconds to wait."""
    if Route.objects.filter(pk=route_id, next_send_at__lte=now).update(
        next_send_at=now + SEND_INTERVAL
    ):
        return 0.0
    next_at = Route.objects.filter(pk=route_id).values_list("next_send_at", flat=True).first()
    if next_at is None:
        return 0.0
    # a little over the gap, so the retry does not land a hair early and lose again
    return max(0.05, (next_at - now).total_seconds() + 0.05)


# ---------------------------------------------------------------------------
# one try


def attempt(delivery_id: int, transport: Transport, now: datetime | None = None) -> Step:
    """Try delivery `delivery_id` once, if it is due and ours; say what comes next."""
    now = now or timezone.now()
    if not claim(delivery_id, now):
        return _not_claimed(delivery_id, now)
    delivery = Delivery.objects.select_related("route").get(pk=delivery_id)
    route = delivery.route
    if route is None or not route.enabled:
        _finish(delivery, Delivery.FAILED, error="route deleted or disabled")
        return Step()
    if _earlier_unsent(delivery):
        # A resolved message must not overtake its firing one held back by a 429 or a
        # backoff: wait for it (it is delivered, or fails for good, within bounded tries).
        _release(delivery, now + THREAD_WAIT)
        return Step(retry_in=THREAD_WAIT.total_seconds())
    wait = claim_send_slot(route.pk, now)
    if wait:
        _release(delivery, now + timedelta(seconds=wait))
        return Step(retry_in=wait)
    try:
        url = route.post_url
    except SecretError as exc:
        # No POST was made: the route cannot be used until its key is configured again.
        _finish(delivery, Delivery.FAILED, error=str(exc))
        return Step(follow_ups=_mark_route_failing(route, str(exc)))
    started = timezone.now()
    result = transport.send(url, delivery.message)
    return _record(delivery, route, result, started)


def _earlier_unsent(delivery: Delivery) -> bool:
    """An earlier message of the same thread to the same route still waiting (a 429, a
    backoff). One being sent right now is not waited for: it holds the route's send slot,
    so this one goes a slot later anyway — and if its sender died, waiting would hold this
    one until the sweep, for a message Slack has most likely already shown."""
    if not delivery.thread or delivery.route_id is None:
        return False
    return Delivery.objects.filter(
        route_id=delivery.route_id,
        thread=delivery.thread,
        pk__lt=delivery.pk,
        state=Delivery.PENDING,
    ).exists()


def _not_claimed(delivery_id: int, now: datetime) -> Step:
    row = Delivery.objects.filter(pk=delivery_id).values("state", "due_at", "lease_until").first()
    if row is None or row["state"] in (Delivery.DELIVERED, Delivery.FAILED):
        return Step()  # done (a duplicate or redelivered task): nothing to do
    if row["state"] == Delivery.PENDING:
        return Step(retry_in=max(0.05, (row["due_at"] - now).total_seconds()))
    # Another sender holds it: look again when its lease ends, in case it died.
    lease_until = row["lease_until"] or now
    return Step(retry_in=max(1.0, (lease_until - now).total_seconds() + 1))


def _record(delivery: Delivery, route: Route, result: SendResult, started: datetime) -> Step:
    outcome = classify(result)
    DeliveryAttempt.objects.create(
        delivery=delivery,
        started_at=started,
        http_status=result.status,
        error="" if outcome is Outcome.DELIVERED else result.body[:300],
        duration_ms=int(result.duration_s * 1000),
        outcome=outcome.value,
    )
    delivery.attempts += 1
    log.info(
        "delivery %s to route %s (%s): try %s %s",
        delivery.pk,
        route.pk,
        route.name,
        delivery.attempts,
        result.reason,
    )
    if outcome is Outcome.DELIVERED:
        _finish(delivery, Delivery.DELIVERED)
        _mark_route_working(route)
        return Step()
    if outcome is Outcome.PERMANENT:
        _finish(delivery, Delivery.FAILED, error=result.reason)
        return Step(follow_ups=_mark_route_failing(route, result.reason))
    if outcome is Outcome.RATE_LIMITED:
        wait = result.retry_after or DEFAULT_RETRY_AFTER
        _hold_route(route, timezone.now() + timedelta(seconds=wait))
    else:
        delivery.transient_failures += 1
        wait = transient_delay(delivery.transient_failures)
    if delivery.transient_failures >= MAX_TRANSIENT or delivery.attempts >= MAX_ATTEMPTS:
        _finish(
            delivery,
            Delivery.FAILED,
            error=f"gave up after {delivery.attempts} tries: {result.reason}",
        )
        return Step()
    delivery.last_error = result.reason[:300]
    _release(delivery, timezone.now() + timedelta(seconds=wait))
    return Step(retry_in=wait)


def transient_delay(failures: int) -> float:
    """Exponential backoff with jitter: 2–3 s, 4–6 s, 8–12 s … (at most 5 min), so
    senders that failed together do not come back together."""
    base = min(300.0, 2.0 * 2 ** (failures - 1))
    return float(base * random.uniform(1.0, 1.5))


def _release(delivery: Delivery, due: datetime) -> None:
    """Back to PENDING until `due` (only if still ours: the claim is the lock)."""
    Delivery.objects.filter(pk=delivery.pk, state=Delivery.SENDING).update(
        state=Delivery.PENDING,
        due_at=due,
        lease_until=None,
        attempts=delivery.attempts,
        transient_failures=delivery.transient_failures,
        last_error=delivery.last_error,
    )


def _finish(delivery: Delivery, state: str, error: str = "") -> None:
    Delivery.objects.filter(pk=delivery.pk, state=Delivery.SENDING).update(
        state=state,
        lease_until=None,
        attempts=delivery.attempts,
        transient_failures=delivery.transient_failures,
        delivered_at=timezone.now() if state == Delivery.DELIVERED else None,
        last_error=error[:300],
    )


def _hold_route(route: Route, until: datetime) -> None:
    """Slack said 429: every sender to this webhook waits, not only this delivery."""
    Route.objects.filter(pk=route.pk, next_send_at__lt=until).update(next_send_at=until)


def _mark_route_working(route: Route) -> None:
    Route.objects.filter(pk=route.pk, state=Route.FAILING).update(
        state=Route.OK, failing_reason="", state_since=timezone.now()
    )


def _mark_route_failing(route: Route, reason: str) -> list[int]:
    """Mark the route failing; on the change from working, tell another route about it
    (only once: the conditional UPDATE decides who saw the change)."""
    changed = (
        Route.objects.filter(pk=route.pk)
        .exclude(state=Route.FAILING)
        .update(state=Route.FAILING, failing_reason=reason[:300], state_since=timezone.now())
    )
    log.warning("route %s (%s) is failing: %s", route.pk, route.name, reason)
    if not changed:
        Route.objects.filter(pk=route.pk).update(failing_reason=reason[:300])
        return []
    other = _another_route(route)
    if other is None:
        return []
    notice = Notice(
        kind="firing",
        severity="warning",
        title=f"Slack route “{route.name}” is failing: {reason}",
        where=Where(),
        cause="Its alerts are not reaching that channel. Fix or replace the webhook in the"
        " admin (Slack routes); the next delivery that succeeds marks it working again.",
    )
    with transaction.atomic():
        return [_new_delivery(other, notice, build_message(notice)).pk]


def _another_route(failing: Route) -> Route | None:
    """Where to report a failing route: the SLACK_WEBHOOK_URL route first, else any working one."""
    environment_route()
    return (
        Route.objects.filter(enabled=True, state=Route.OK)
        .exclude(pk=failing.pk)
        .order_by("-from_environment", "pk")
        .first()
    )
