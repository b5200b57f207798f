"""Notifications of alert groups: one message when a group's first members fire, an
update when new places join it (at most once per group interval), a repeat while it
fires unacknowledged, one "recovered" message at once when its cause resolves while its
consequences still fire, and one resolved message (with the incident's summary) when its
last member resolves (docs/rules.md, "Notifications"). What each says:
fleet/alerts/messages.py. Muted members (silences,
maintenance) are left out; one still firing when its mute ends is announced then.

Every message is claimed with a conditional UPDATE on the group row (and on its members'
`notified_firing_at` / `notified_resolved_at`), in the evaluation's transaction, so two
evaluations, or a redelivered one, can never both send it; the delivery rows commit with
that transaction (fleet.notifications.tasks.send_notice).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F

from fleet.alerts import consequences
from fleet.alerts.grouping import Places, is_cause
from fleet.alerts.messages import group_notice, incident_summary, recovered_notice
from fleet.alerts.models import AlertGroup, AlertInstance, AlertState
from fleet.alerts.muting import Mutes
from fleet.notifications.notice import MessageKind, severity_rank
from fleet.notifications.tasks import send_notice

__all__ = ("notify_groups",)

log = logging.getLogger(__name__)

FIRING = AlertState.FIRING


def group_interval() -> dt.timedelta:
    return dt.timedelta(seconds=float(settings.ALERT_GROUP_INTERVAL_S))


def default_repeat() -> dt.timedelta:
    return dt.timedelta(seconds=float(settings.ALERT_REPEAT_S))


def notify_groups(at: dt.datetime, places: Places) -> int:
    """Send what each open group owes; call inside the evaluation's transaction, after
    its instances are written. Returns how many messages were sent."""
    groups = list(AlertGroup.objects.filter(closed_at__isnull=True))
    if not groups:
        return 0
    members: dict[int, list[AlertInstance]] = defaultdict(list)
    rows = AlertInstance.objects.filter(group__in=groups).select_related("rule")
    for inst in rows:
        members[inst.group_id].append(inst)  # type: ignore[index]
    mutes = Mutes.at(at)
    sent = 0
    for group in groups:
        try:
            with transaction.atomic():  # a message that cannot be built undoes its claims
                sent += _settle(group, members.get(group.pk, []), at, places, mutes)
        except Exception:
            log.exception("alert group %s (%s): its notification failed", group.pk, group.key)
    return sent


def _settle(
    group: AlertGroup,
    members: list[AlertInstance],
    at: dt.datetime,
    places: Places,
    mutes: Mutes,
) -> int:
    """What one group owes now: the first message, an update, a repeat, the resolved
    message, or nothing; claims it and sends it. Returns 1 when a message went."""
    firing = [m for m in members if m.state == FIRING]
    audible = [
        m for m in firing if not mutes.reason(m.labels, m.site_id, m.rack_id, m.node_id, m.loop_id)
    ]
    announced = [m for m in members if m.notified_firing_at is not None]
    fresh = [m for m in audible if m.notified_firing_at is None]
    if not firing:
        if group.first_sent_at is None or not announced:
            AlertGroup.objects.filter(pk=group.pk, closed_at__isnull=True).update(closed_at=at)
            return 0
        rows = AlertGroup.objects.filter(pk=group.pk, closed_at__isnull=True)
        if not rows.update(closed_at=at, resolved_sent_at=at, last_sent_at=at):
            return 0
        AlertInstance.objects.filter(
            pk__in=[m.pk for m in announced], notified_resolved_at__isnull=True
        ).update(notified_resolved_at=at)
        return _send(group, "resolved", announced, at, places, summary=incident_summary(members))
    if group.first_sent_at is None:
        if not fresh:
            return 0
        if not _claim_group(group, at, first=True):
            return 0
        _claim_members(fresh, at)
        return _send(group, "firing", audible, at, places)
    assert group.last_sent_at is not None
    if _cause_recovered(group, members, firing) and _claim_recovered(group, at):
        _claim_members(fresh, at)  # the message counts what is still open, them too
        return _send(group, "recovered", audible, at, places, cause_members=members)
    since_last = at - group.last_sent_at
    if fresh and since_last >= group_interval():
        news = _is_news(fresh, announced)
        _claim_members(fresh, at)  # more rules on places already announced: no message
        if news and _claim_group(group, at):
            return _send(group, "update", audible, at, places)
        return 0
    unacknowledged = [m for m in audible if m.acknowledged_at is None and m.notified_firing_at]
    repeat_due = unacknowledged and since_last >= _repeat_every(unacknowledged)
    if repeat_due and _claim_group(group, at):
        return _send(group, "repeat", audible, at, places)
    return 0


def _is_news(fresh: list[AlertInstance], announced: list[AlertInstance]) -> bool:
    """New places, worse than anything said so far, or a place announced hot that is now
    off the bus (or a node gone silent): a consequence is news."""
    known = {(m.scope, m.entity) for m in announced}
    worst = max((severity_rank(m.rule.severity) for m in announced), default=-1)
    gone = {(m.scope, m.entity) for m in announced if _is_effect(m)}
    return any(
        (m.scope, m.entity) not in known
        or severity_rank(m.rule.severity) > worst
        or (_is_effect(m) and (m.scope, m.entity) not in gone)
        for m in fresh
    )


def _is_effect(m: AlertInstance) -> bool:
    return consequences.is_consequence(m.scope, m.rule.signal)


def _repeat_every(members: list[AlertInstance]) -> dt.timedelta:
    default = default_repeat()
    return min(m.rule.repeat_interval or default for m in members)


def _claim_group(group: AlertGroup, at: dt.datetime, *, first: bool = False) -> bool:
    rows = AlertGroup.objects.filter(pk=group.pk, closed_at__isnull=True)
    if first:
        rows = rows.filter(first_sent_at__isnull=True)
        changed = rows.update(first_sent_at=at, last_sent_at=at)
    else:
        rows = rows.filter(last_sent_at=group.last_sent_at)
        changed = rows.update(last_sent_at=at)
    return changed == 1


def _cause_recovered(
    group: AlertGroup, members: list[AlertInstance], firing: list[AlertInstance]
) -> bool:
    """The group's cause has resolved (every cause member) and consequences still fire,
    and that has not been said yet."""
    if group.recovered_sent_at is not None:
        return False
    causes = [m for m in members if is_cause(group.key, m)]
    if not causes or any(m.state != AlertState.RESOLVED for m in causes):
        return False
    return any(consequences.is_consequence(m.scope, m.rule.signal) for m in firing)


def _claim_recovered(group: AlertGroup, at: dt.datetime) -> bool:
    rows = AlertGroup.objects.filter(
        pk=group.pk, closed_at__isnull=True, recovered_sent_at__isnull=True
    )
    return rows.update(recovered_sent_at=at, last_sent_at=at) == 1


def _claim_members(members: list[AlertInstance], at: dt.datetime) -> None:
    AlertInstance.objects.filter(
        pk__in=[m.pk for m in members], notified_firing_at__isnull=True
    ).update(notified_firing_at=at)
    for m in members:
        m.notified_firing_at = m.notified_firing_at or at


def _send(
    group: AlertGroup,
    kind: MessageKind,
    members: list[AlertInstance],
    at: dt.datetime,
    places: Places,
    *,
    summary: str = "",
    cause_members: list[AlertInstance] | None = None,
) -> int:
    if kind == "recovered":
        notice = recovered_notice(group, cause_members or members, members, at, places)
    else:
        notice = group_notice(group, kind, members, places, summary=summary)
    fields: dict[str, Any] = {"messages": F("messages") + 1}
    if kind != "recovered":  # the incident's headline stays what it was about
        fields["title"] = notice.title[:300]
    AlertGroup.objects.filter(pk=group.pk).update(**fields)
    send_notice(notice)
    return 1
