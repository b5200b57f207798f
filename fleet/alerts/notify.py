"""Notifications of alert groups: one message when a group's first members fire, an
update when new places join it (at most once per group interval), a repeat while it
fires unacknowledged, one "recovered" message at once when its cause resolves while its
consequences still fire, and one resolved message (with the incident's summary) when its
last member resolves (docs/rules.md, "Notifications"). Muted members (silences,
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
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F

from fleet.alerts import consequences
from fleet.alerts.evaluate_state import Snapshot
from fleet.alerts.grouping import SCOPE_ORDER, Place, Places, is_cause, rack_span
from fleet.alerts.models import AlertGroup, AlertInstance, AlertState
from fleet.alerts.muting import Mutes
from fleet.health.lost import (
    OFF_THE_BUS_XID,
    RESET_NEEDED,
    gpus_off_the_bus_words,
    lost_cause_words,
)
from fleet.models import GPU
from fleet.notifications.notice import (
    SEVERITIES,
    Member,
    MessageKind,
    Notice,
    Severity,
    Where,
    duration_words,
    severity_rank,
)
from fleet.notifications.tasks import send_notice

__all__ = (
    "dashboard_url",
    "gpu_hours_words",
    "group_notice",
    "incident_summary",
    "notify_groups",
    "placeholders",
    "recovered_notice",
)

log = logging.getLogger(__name__)

FIRING = AlertState.FIRING
_SLOWDOWN_SIGNALS = frozenset({"hw_thermal_slowdown", "sw_thermal_slowdown"})


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
    audible = [m for m in firing if not mutes.reason(m.labels, m.site_id, m.rack_id, m.node_id)]
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


# ---------------------------------------------------------------------------
# what a group's message says


def group_notice(
    group: AlertGroup,
    kind: MessageKind,
    members: list[AlertInstance],
    places: Places,
    *,
    summary: str = "",
) -> Notice:
    """The message for `members` of `group` (the audible firing ones, or for a resolved
    message the ones that were announced, under the title last announced)."""
    ordered = sorted(members, key=_urgency)
    lead = ordered[0]
    lead_place = places.of(lead.scope, lead.entity)
    unit = _unit(lead)
    by_entity: dict[tuple[str, str], list[AlertInstance]] = defaultdict(list)
    for m in ordered:
        by_entity[(m.scope, m.entity)].append(m)
    single = len(by_entity) == 1
    lead_title = render_summary(
        lead.rule.summary, placeholders(lead, _names(lead, lead_place), unit), lead.rule.name
    )
    title, where, cause = lead_title, lead_place.where(), ""
    effects = [
        m
        for m in ordered
        if consequences.is_consequence(m.scope, m.rule.signal) and not is_cause(group.key, m)
    ]
    if group.key.startswith("loop:"):
        title, where, cause = _loop_story(group, ordered, places)
    elif effects:  # a rack's power incident and what it took down
        cause_members = [m for m in ordered if is_cause(group.key, m)]
        base = group.title.split(" → ")[0]
        if cause_members:
            lead_cause = cause_members[0]
            names = _names(lead_cause, places.of(lead_cause.scope, lead_cause.entity))
            base = render_summary(
                lead_cause.rule.summary,
                placeholders(lead_cause, names, _unit(lead_cause)),
                lead_cause.rule.name,
            )
        title = f"{base or lead_title} → {_consequence_words(effects, places)}"
        where = _common_where(ordered, places)
    elif not single:
        title = f"{lead.rule.name}: {_count(by_entity)} in {_common_place(ordered, places)}"
        where = _common_where(ordered, places)
    if kind == "resolved" and group.title:
        # As it was announced: re-rendered with the values it resolved at, a summary
        # would read "Resolved: CDU-1: 0 pump(s) failed".
        title = group.title
    fired = [m.fired_at or m.started_at for m in ordered]
    duration = None
    if kind == "resolved":
        ends = [m.resolved_at for m in ordered if m.resolved_at is not None]
        duration = (max(ends) - min(fired)) if ends else None
    return Notice(
        kind=kind,
        severity=_worst(m.rule.severity for m in ordered),
        title=title,
        where=where,
        site_id=group.site_id,
        since=min(fired),
        value=lead.value if single and len(ordered) == 1 else None,
        threshold=lead.rule.threshold if single and len(ordered) == 1 else None,
        unit=unit,
        cause=cause,
        runbook_url=lead.rule.runbook_url,
        dashboard_url=dashboard_url(group.site_id),
        duration=duration,
        members=() if single else _members(by_entity, places),
        thread=f"alert-group:{group.pk}",
        summary=summary,
    )


def recovered_notice(
    group: AlertGroup,
    members: list[AlertInstance],
    audible: list[AlertInstance],
    at: dt.datetime,
    places: Places,
) -> Notice:
    """ "CDU-1 recovered after 3 min 2 s (3 pumps running, 115 L/min); still open: 33 GPUs
    off the bus in A01–A02 — reset needed": the cause is back, what it left behind is not."""
    causes = sorted((m for m in members if is_cause(group.key, m)), key=_urgency)
    began = min(m.fired_at or m.started_at for m in causes)
    ended = max(m.resolved_at or at for m in causes)
    name, figures = _cause_now(group, causes[0], at, places)
    still = [m for m in audible if not is_cause(group.key, m)]
    title = f"{name} recovered after {duration_words(ended - began)}"
    title += f" ({figures})" if figures else ""
    open_words = _still_open_words(still, places)
    title += f"; still open: {open_words}" if open_words else ""
    by_entity: dict[tuple[str, str], list[AlertInstance]] = defaultdict(list)
    for m in sorted(still, key=_urgency):
        by_entity[(m.scope, m.entity)].append(m)
    return Notice(
        kind="recovered",
        severity=_worst(m.rule.severity for m in still) if still else "info",
        title=title,
        where=places.of(causes[0].scope, causes[0].entity).where(),
        site_id=group.site_id,
        since=began,
        dashboard_url=dashboard_url(group.site_id),
        duration=ended - began,
        members=_members(by_entity, places),
        thread=f"alert-group:{group.pk}",
    )


def _cause_now(
    group: AlertGroup, cause: AlertInstance, at: dt.datetime, places: Places
) -> tuple[str, str]:
    """The cause's name and its figures now: a loop's pumps and flow from its latest
    state; another cause's summary at the value it resolved with."""
    place = places.of(cause.scope, cause.entity)
    if cause.scope == "loop" and place.loop_id is not None:
        reading = Snapshot(at.timestamp()).readings("loop").get((place.loop_id,))
        values = {} if reading is None else reading.values
        figures = []
        if (pumps := values.get("pumps_running")) is not None:
            figures.append(f"{pumps:.0f} {'pump' if pumps == 1 else 'pumps'} running")
        if (flow := values.get("flow_lpm")) is not None:
            figures.append(f"{flow:.0f} L/min")
        return place.names.get("loop", group.key), ", ".join(figures)
    names = _names(cause, place)
    summary = render_summary(
        cause.rule.summary, placeholders(cause, names, _unit(cause)), cause.rule.name
    )
    return place.where().label(), summary


def _still_open_words(still: list[AlertInstance], places: Places) -> str:
    parts: list[str] = []
    lost = [m for m in still if consequences.is_off_the_bus(m.scope, m.rule.signal)]
    if lost:
        span = rack_span(_rack_names(lost, places))
        parts.append(f"{gpus_off_the_bus_words(len({m.entity for m in lost}))} in {span}")
        parts[-1] += f" — {RESET_NEEDED}"
    down = [m for m in still if consequences.is_node_down(m.scope, m.rule.signal)]
    if down:
        nodes = {m.entity for m in down}
        noun = "node" if len(nodes) == 1 else "nodes"
        parts.append(f"{len(nodes)} {noun} silent in {rack_span(_rack_names(down, places))}")
    lost_gpus = {m.entity for m in lost}
    hot = {
        m.entity
        for m in still
        if m.scope == "gpu"
        and m.entity not in lost_gpus
        and not consequences.is_consequence(m.scope, m.rule.signal)
    }
    if hot:
        span = rack_span(_rack_names([m for m in still if m.entity in hot], places))
        parts.append(f"{_gpus(len(hot))} still hot in {span}")
    return "; ".join(parts)


def incident_summary(members: list[AlertInstance]) -> str:
    """For a resolved incident with GPUs in it: "Lasted 9 min 4 s; 64 GPUs affected;
    33 GPUs off the bus, 2.7 GPU-hours lost" (off the bus: from each lost GPU's first
    off-the-bus alert firing to its last resolving)."""
    fired = [m for m in members if m.fired_at is not None]
    gpus = {m.entity for m in fired if m.scope == "gpu"}
    if not gpus:
        return ""
    began = min(m.fired_at for m in fired if m.fired_at is not None)
    ended = max((m.resolved_at for m in fired if m.resolved_at is not None), default=began)
    words = [f"Lasted {duration_words(ended - began)}", f"{_gpus(len(gpus))} affected"]
    spans: dict[str, tuple[dt.datetime, dt.datetime]] = {}
    for m in fired:
        if m.fired_at is None or not consequences.is_off_the_bus(m.scope, m.rule.signal):
            continue
        end = m.resolved_at or ended
        first, last = spans.get(m.entity, (m.fired_at, end))
        spans[m.entity] = (min(first, m.fired_at), max(last, end))
    if spans:
        hours = sum((b - a).total_seconds() for a, b in spans.values()) / 3600.0
        words.append(f"{gpus_off_the_bus_words(len(spans))}, {gpu_hours_words(hours)} lost")
    return "; ".join(words)


def gpu_hours_words(hours: float) -> str:
    """ "2.7 GPU-hours", "0.15 GPU-hours": two figures for less than one."""
    figure = f"{hours:.1f}" if hours >= 1 else f"{hours:.2f}"
    return f"{figure} GPU-hours"


def _worst(severities: Iterable[str]) -> Severity:
    worst = max(severities, key=severity_rank)
    return SEVERITIES[severity_rank(worst)]


def _unit(inst: AlertInstance) -> str:
    spec = inst.rule.signal_spec
    return spec.unit if spec is not None and spec.unit != "flag" else ""


def _urgency(m: AlertInstance) -> tuple[int, int, dt.datetime, str, str]:
    """Most severe first, causes before symptoms, earliest first; then a fixed order, so
    the same alerts always read the same way."""
    return (
        -severity_rank(m.rule.severity),
        SCOPE_ORDER.get(m.scope, 9),
        m.fired_at or m.started_at,
        m.rule.key,
        m.entity,
    )


def _loop_story(
    group: AlertGroup, ordered: list[AlertInstance], places: Places
) -> tuple[str, Where, str]:
    """Cause, then symptoms: "CDU-1: no pump running, flow 0 L/min → 64 GPUs in A01–A02
    in thermal slowdown"; before any symptom, what the loop cools. The cause line names
    the racks it cools and their GPUs."""
    loop_id = int(group.key.split(":")[1])
    loop_name, site_id = places.loops.get(loop_id, (f"loop {loop_id}", None))
    causes = [m for m in ordered if m.scope == "loop"]
    symptoms = [m for m in ordered if m.scope != "loop"]
    effects = _consequence_words(
        [m for m in symptoms if consequences.is_consequence(m.scope, m.rule.signal)], places
    )
    served = places.racks_of_loop(loop_id)
    cooled = f"{rack_span(served) or 'no rack'} ({places.gpus_of_loop(loop_id)} GPUs)"
    parts = _cause_parts(loop_name, causes, places)
    if parts:  # the first two in the title, all of them in the cause line
        more = [f"{len(parts) - 2} more"] if len(parts) > 2 else []
        base = f"{loop_name}: {', '.join(parts[:2] + more)}"
    else:  # the loop has recovered, its GPUs not yet: the cause as last announced
        base = group.title.split(" → ")[0].split("; it cools")[0] or f"{loop_name} alert"
    title = f"{base}; it cools {cooled}"
    if effects:  # what it did to the equipment it cools: the worst news leads
        title = f"{base} → {effects}"
    elif symptoms:
        gpus = {m.entity for m in symptoms if m.scope == "gpu"}
        racks = {places.of(m.scope, m.entity).names.get("rack", "") for m in symptoms}
        if gpus:
            title = f"{base} → {_gpus(len(gpus))} in {rack_span(racks)} {_symptom(symptoms)}"
        else:
            title = f"{base} → racks {rack_span(racks)} running hot"
    site = places.sites.get(site_id) if site_id is not None else None
    cause = f"{loop_name} cools {cooled}."
    if len(parts) > 2:
        cause += f" Its alerts: {'; '.join(parts)}."
    return title, Where(site=site, loop=loop_name), cause


def _consequence_words(effects: list[AlertInstance], places: Places) -> str:
    """ "33 GPUs off the bus (XID 79) in A01–A02; 2 nodes silent in A01", or "" when
    there are none."""
    parts: list[str] = []
    lost = [m for m in effects if consequences.is_off_the_bus(m.scope, m.rule.signal)]
    if lost:
        gpus = {m.entity for m in lost}
        xid = (
            OFF_THE_BUS_XID
            if any(m.rule.signal in consequences.XID_SIGNALS for m in lost)
            else None
        )
        span = rack_span(_rack_names(lost, places))
        why = f" ({lost_cause_words(xid)})" if xid is not None else ""
        parts.append(f"{gpus_off_the_bus_words(len(gpus))}{why} in {span}")
    down = [m for m in effects if consequences.is_node_down(m.scope, m.rule.signal)]
    if down:
        nodes = {m.entity for m in down}
        noun = "node" if len(nodes) == 1 else "nodes"
        parts.append(f"{len(nodes)} {noun} silent in {rack_span(_rack_names(down, places))}")
    return "; ".join(parts)


def _rack_names(members: Iterable[AlertInstance], places: Places) -> set[str]:
    return {places.of(m.scope, m.entity).names.get("rack", "") for m in members} - {""}


def _cause_parts(loop_name: str, causes: list[AlertInstance], places: Places) -> list[str]:
    """The loop's failures, most severe first, each rule's summary with the loop's name
    said once: ['no pump running', 'flow 0 L/min']."""
    parts: list[str] = []
    for inst in causes:
        names = _names(inst, places.of("loop", inst.entity))
        text = render_summary(
            inst.rule.summary, placeholders(inst, names, _unit(inst)), inst.rule.name
        )
        text = text.removeprefix(loop_name).lstrip(": ").strip() or inst.rule.name
        if text not in parts:
            parts.append(text)
    return parts


def _gpus(count: int) -> str:
    return "1 GPU" if count == 1 else f"{count} GPUs"


def _symptom(symptoms: list[AlertInstance]) -> str:
    if any(m.rule.signal in _SLOWDOWN_SIGNALS for m in symptoms):
        return "in thermal slowdown"
    if any(m.rule.severity == "critical" for m in symptoms):
        return "at their slowdown limit"
    return "near their slowdown limit"


def _count(by_entity: dict[tuple[str, str], list[AlertInstance]]) -> str:
    scopes = {scope for scope, _ in by_entity}
    nouns = {"gpu": "GPUs", "node": "nodes", "rack": "racks", "feed": "feeds"}
    noun = nouns.get(next(iter(scopes)), "places") if len(scopes) == 1 else "places"
    return f"{len(by_entity)} {noun}"


def _common_place(members: list[AlertInstance], places: Places) -> str:
    where = _common_where(members, places)
    if where.rack:
        return f"rack {where.rack}"
    racks = {places.of(m.scope, m.entity).names.get("rack", "") for m in members} - {""}
    if racks:
        return f"racks {rack_span(racks)}"
    return where.label()


def _common_where(members: list[AlertInstance], places: Places) -> Where:
    """The levels every member shares (site, hall, rack)."""
    wheres = [places.of(m.scope, m.entity).where() for m in members]
    shared: dict[str, str | None] = {}
    for level in ("site", "hall", "rack"):
        values = {getattr(w, level) for w in wheres}
        if len(values) != 1:
            break
        shared[level] = values.pop()
    return Where(**shared)


def _members(
    by_entity: dict[tuple[str, str], list[AlertInstance]], places: Places
) -> tuple[Member, ...]:
    out = []
    for (scope, entity), insts in by_entity.items():
        lead = insts[0]
        out.append(
            Member(
                where=places.of(scope, entity).where(),
                value=lead.value,
                since=lead.fired_at or lead.started_at,
                cause=", ".join(dict.fromkeys(i.rule.name for i in insts)),
            )
        )
    return tuple(out)


def _names(inst: AlertInstance, place: Place) -> dict[str, Any]:
    """Summary placeholders naming the entity (a GPU's uuid and model read here: only
    for the few instances a message leads with)."""
    names: dict[str, Any] = dict(place.names)
    if inst.scope == "gpu":
        parts = inst.entity.split(":")
        gpu = None
        if len(parts) == 2 and parts[1].isdigit() and parts[0].isdigit():
            gpu = GPU.objects.filter(node_id=int(parts[0]), index=int(parts[1])).first()
            names["gpu"] = int(parts[1])
        names.update(
            gpu_uuid="" if gpu is None else gpu.uuid, gpu_model="" if gpu is None else gpu.model
        )
    return names


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
