"""The alerts page's content: active alerts with whether they are acknowledged or muted,
the silences and maintenance windows in force, recent notifications, Slack routes and the
delivery log. Plain data for the template; every query bounded."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Prefetch

from fleet.alerts.models import (
    ACTIVE_STATES,
    AlertGroup,
    AlertInstance,
    MaintenanceWindow,
    Silence,
)
from fleet.alerts.muting import Mutes, matchers_text
from fleet.notifications.models import Delivery, DeliveryAttempt, Route
from fleet.notifications.slack import redact_url

__all__ = ("ActiveAlert", "alerts_page", "can_acknowledge")

MAX_ACTIVE = 500
MAX_RECENT = 50
_PLACE = ("site", "loop", "rack", "feed", "node", "gpu")


@dataclass(frozen=True)
class ActiveAlert:
    pk: int
    rule: str
    severity: str
    state: str
    where: str
    value: float | None
    unit: str
    since: dt.datetime
    no_data: bool
    acknowledged: str  # "dana: on it" or ""
    muted: str  # "silence 3", "rack in maintenance" or ""
    runbook_url: str


def can_acknowledge(user: Any) -> bool:
    """Operators: whoever may change alert instances (admin: a group or the permission)."""
    return bool(user.is_authenticated and user.has_perm("alerts.change_alertinstance"))


def alerts_page(now: dt.datetime, *, show_urls: bool) -> dict[str, Any]:
    mutes = Mutes.at(now)
    active = (
        AlertInstance.objects.filter(state__in=ACTIVE_STATES)
        .select_related("rule")
        .order_by("state", "-started_at")[:MAX_ACTIVE]
    )
    rows = [_active(inst, mutes) for inst in active]
    rows.sort(key=lambda a: (a.state != "firing", _rank(a.severity), a.since))
    return {
        "now": now,
        "active": rows,
        "firing": sum(1 for a in rows if a.state == "firing"),
        "pending": sum(1 for a in rows if a.state == "pending"),
        "acknowledged": sum(1 for a in rows if a.acknowledged),
        "muted": sum(1 for a in rows if a.muted),
        "silences": [
            {"pk": s.pk, "matchers": matchers_text(s.matchers), "silence": s}
            for s in Silence.objects.filter(ends_at__gt=now).order_by("starts_at")[:MAX_RECENT]
        ],
        "windows": list(
            MaintenanceWindow.objects.filter(ends_at__gt=now)
            .select_related("site", "rack", "node")
            .order_by("starts_at")[:MAX_RECENT]
        ),
        "groups": list(
            AlertGroup.objects.filter(messages__gt=0)
            .annotate(size=Count("members"))
            .order_by("-last_sent_at")[:MAX_RECENT]
        ),
        "routes": [_route(r, show_urls) for r in Route.objects.all()],
        "deliveries": list(
            Delivery.objects.select_related("route")
            .prefetch_related(
                Prefetch("tries", queryset=DeliveryAttempt.objects.order_by("started_at"))
            )
            .order_by("-created_at")[:MAX_RECENT]
        ),
    }


def _rank(severity: str) -> int:
    return {"critical": 0, "warning": 1, "info": 2}.get(severity, 3)


def _active(inst: AlertInstance, mutes: Mutes) -> ActiveAlert:
    labels = inst.labels or {}
    where = " / ".join(
        f"{'GPU ' if k == 'gpu' else ''}{labels[k]}" for k in _PLACE if labels.get(k)
    )
    spec = inst.rule.signal_spec
    unit = spec.unit if spec is not None and spec.unit != "flag" else ""
    ack = ""
    if inst.acknowledged_at is not None:
        ack = f"{inst.acknowledged_by}: {inst.ack_comment}"
    return ActiveAlert(
        pk=inst.pk,
        rule=inst.rule.name,
        severity=inst.rule.severity,
        state=inst.state,
        where=where or f"{inst.scope} {inst.entity}",
        value=inst.value,
        unit=unit,
        since=inst.fired_at or inst.started_at,
        no_data=inst.no_data,
        acknowledged=ack,
        muted=mutes.reason(labels, inst.site_id, inst.rack_id, inst.node_id),
        runbook_url=inst.rule.runbook_url,
    )


def _route(route: Route, show_urls: bool) -> dict[str, Any]:
    # The webhook is a secret: even an operator sees only its host and last characters.
    return {
        "name": route.name,
        "site": route.site,
        "min_severity": route.min_severity,
        "enabled": route.enabled,
        "failing": route.state == Route.FAILING,
        "reason": route.failing_reason,
        "since": route.state_since,
        "webhook": redact_url(route.webhook_url) if show_urls else "",
    }
