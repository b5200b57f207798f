"""Acknowledge: someone is on it. It stops the group's repeats; it never resolves an alert
(only its condition clearing does), and a new breach later is a new instance, unacknowledged.
One alert or a whole incident (its group's active members) at a time."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.db.models import Q
from django.utils import timezone

from fleet.alerts.models import ACTIVE_STATES, AlertGroup, AlertInstance

__all__ = ("MAX_COMMENT", "acknowledge", "acknowledge_incident")

MAX_COMMENT = 300


def acknowledge(
    instance_ids: Iterable[int], by: str, comment: str, at: dt.datetime | None = None
) -> int:
    """Acknowledge the active (pending or firing) instances among `instance_ids` not yet
    acknowledged, recording who and why; returns how many changed. Refuses an empty
    reason: the next person on shift needs it."""
    comment = comment.strip()
    if not comment:
        raise ValueError("say why: an acknowledgement needs a comment")
    if len(comment) > MAX_COMMENT:
        raise ValueError(f"the comment is longer than {MAX_COMMENT} characters")
    if not by.strip():
        raise ValueError("an acknowledgement needs the name of who made it")
    rows = AlertInstance.objects.filter(
        Q(pk__in=list(instance_ids)), state__in=ACTIVE_STATES, acknowledged_at__isnull=True
    )
    return rows.update(
        acknowledged_at=at or timezone.now(), acknowledged_by=by[:150], ack_comment=comment
    )


def acknowledge_incident(
    group_id: int, by: str, comment: str, at: dt.datetime | None = None
) -> int:
    """Acknowledge an incident: its active members not yet acknowledged (its cause, its
    symptoms and its consequences), with one reason, as `acknowledge` does for each.
    Refuses an incident that is not open; returns how many members changed."""
    if not AlertGroup.objects.filter(pk=group_id, closed_at__isnull=True).exists():
        raise ValueError(f"incident {group_id} is not open")
    members = AlertInstance.objects.filter(group_id=group_id, state__in=ACTIVE_STATES)
    return acknowledge(members.values_list("pk", flat=True), by, comment, at)
