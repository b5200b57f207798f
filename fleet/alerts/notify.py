"""Notifications of alert instances: one message when an instance fires, one when a firing
instance resolves — exactly once each (docs/rules.md, "Notifications").

The evaluation that makes the transition claims its notification with a conditional UPDATE
(`notified_firing_at` / `notified_resolved_at` set only where still NULL), in the same
transaction as the state change; whoever's UPDATE changed the row builds the `Notice` and
hands it to `send_notice()`, whose delivery rows commit with that transaction. Two
evaluations, or a redelivered one, can never both win. A pending instance that resolves
without firing, and no-data changes of a firing one, send nothing.

Names (site, hall, rack, node, GPU…) are looked up per notified instance: few, and never
for unchanged instances.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from typing import Any, Literal

from django.conf import settings
from django.db import transaction

from fleet.alerts.models import AlertInstance, AlertState
from fleet.models import GPU, CoolingLoop, Node, PowerFeed, Rack, Site
from fleet.notifications.notice import Notice, Where
from fleet.notifications.tasks import send_notice

__all__ = ("Transition", "claim", "dashboard_url", "notice_for", "notify", "placeholders")

log = logging.getLogger(__name__)

Transition = Literal["firing", "resolved"]
_CLAIM_FIELD: dict[Transition, str] = {
    "firing": "notified_firing_at",
    "resolved": "notified_resolved_at",
}


def transition(before: str, after: str) -> Transition | None:
    """What a state change announces: firing (new or from pending), resolved (only from
    firing: a pending instance dropped without firing says nothing), else nothing."""
    if after == AlertState.FIRING and before != AlertState.FIRING:
        return "firing"
    if after == AlertState.RESOLVED and before == AlertState.FIRING:
        return "resolved"
    return None


def claim(instance_id: int, kind: Transition, at: dt.datetime) -> bool:
    """Take the right to send this instance's `kind` notification: True for exactly one
    caller, ever. A resolved notice is only claimed for an instance whose firing was."""
    field = _CLAIM_FIELD[kind]
    rows = AlertInstance.objects.filter(pk=instance_id, **{f"{field}__isnull": True})
    if kind == "resolved":
        rows = rows.filter(notified_firing_at__isnull=False)
    return rows.update(**{field: at}) == 1


def notify(changes: Iterable[tuple[AlertInstance, str, str]], at: dt.datetime) -> int:
    """Claim and send the notifications of an evaluation's changes (instance, before,
    after); call inside the evaluation's transaction. Returns how many were sent."""
    sent = 0
    for inst, before, after in changes:
        kind = transition(before, after)
        if kind is None:
            continue
        try:
            with transaction.atomic():  # a notice that cannot be built undoes its claim
                if not claim(inst.pk, kind, at):
                    continue
                send_notice(notice_for(inst, kind))
                sent += 1
        except Exception:
            log.exception("alert %s: the %s notification could not be sent", inst.pk, kind)
    return sent


def notice_for(inst: AlertInstance, kind: Transition) -> Notice:
    rule = inst.rule
    spec = rule.signal_spec
    unit = spec.unit if spec is not None and spec.unit != "flag" else ""
    where, names, site_id = _where(inst.scope, inst.entity)
    duration = None
    if kind == "resolved" and inst.fired_at is not None and inst.resolved_at is not None:
        duration = inst.resolved_at - inst.fired_at
    return Notice(
        kind=kind,
        severity=rule.severity,  # type: ignore[arg-type]
        title=render_summary(rule.summary, placeholders(inst, names, unit), rule.name),
        where=where,
        site_id=site_id,
        since=inst.fired_at or inst.started_at,
        value=inst.value,
        threshold=rule.threshold,
        unit=unit,
        runbook_url=rule.runbook_url,
        dashboard_url=dashboard_url(site_id),
        duration=duration,
    )


def placeholders(inst: AlertInstance, names: dict[str, Any], unit: str) -> dict[str, Any]:
    rule = inst.rule
    return {
        "rule": rule.name,
        "signal": rule.signal,
        "severity": rule.severity,
        "value": inst.value,
        "unit": unit,
        "threshold": rule.threshold,
        "clear_threshold": rule.effective_clear_threshold,
        **names,
    }


def render_summary(template: str, values: dict[str, Any], fallback: str) -> str:
    """The rule's summary with the entity's values; the rule's name if it does not render
    (a placeholder without a value here, e.g. `{value:.1f}` with no value)."""
    try:
        return template.format_map(values) or fallback
    except (KeyError, ValueError, TypeError, IndexError, AttributeError):
        return fallback


def dashboard_url(site_id: int | None) -> str:
    """The live page: `FLEETWATCH_BASE_URL` + "/" when that setting exists, else "/"
    (relative; Slack shows no button for it — docs/notifications.md)."""
    base = str(getattr(settings, "FLEETWATCH_BASE_URL", "") or "").rstrip("/")
    return f"{base}/"


def _where(scope: str, entity: str) -> tuple[Where, dict[str, Any], int | None]:
    """The entity's names (Where), its summary placeholders, and its site for routing."""
    try:
        key = [int(part) for part in entity.split(":")]
    except ValueError:
        return Where(), {}, None
    names: dict[str, Any] = {}
    if scope == "site":
        site = Site.objects.filter(pk=key[0]).first()
        if site is None:
            return Where(), {}, None
        names["site"] = site.name
        return Where(site=site.name), names, site.pk
    if scope == "loop":
        loop = CoolingLoop.objects.select_related("site").filter(pk=key[0]).first()
        if loop is None:
            return Where(), {}, None
        names.update(site=loop.site.name, loop=loop.name)
        return Where(site=loop.site.name, loop=loop.name), names, loop.site_id
    rack: Rack | None = None
    node: Node | None = None
    feed: PowerFeed | None = None
    if scope in ("node", "gpu"):
        node = Node.objects.select_related("rack__hall__site").filter(pk=key[0]).first()
        rack = None if node is None else node.rack
    elif scope == "rack":
        rack = Rack.objects.select_related("hall__site").filter(pk=key[0]).first()
    elif scope == "feed":
        feed = PowerFeed.objects.select_related("rack__hall__site").filter(pk=key[0]).first()
        rack = None if feed is None else feed.rack
    if rack is None:
        return Where(), {}, None
    site = rack.hall.site
    names.update(site=site.name, hall=rack.hall.name, rack=rack.name)
    gpu_label = None
    if node is not None:
        names["node"] = node.name
    if feed is not None:
        names["feed"] = feed.name
    if scope == "gpu" and len(key) > 1:
        gpu = GPU.objects.filter(node_id=key[0], index=key[1]).first()
        names.update(
            gpu=key[1],
            gpu_uuid="" if gpu is None else gpu.uuid,
            gpu_model="" if gpu is None else gpu.model,
        )
        gpu_label = str(key[1])
    where = Where(
        site=site.name,
        hall=rack.hall.name,
        rack=rack.name,
        node=None if node is None else node.name,
        gpu=gpu_label,
        feed=None if feed is None else feed.name,
    )
    return where, names, site.pk
