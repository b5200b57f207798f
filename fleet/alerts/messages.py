"""What an alert group's message says (fleet/alerts/notify.py decides when one is owed):
the firing, update, repeat and resolved messages (cause, then symptoms and consequences),
the "recovered" message when an incident's cause is back and what it caused is not, and a
resolved incident's summary (docs/rules.md, "Notifications")."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from fleet.alerts import consequences
from fleet.alerts.evaluate_state import Snapshot
from fleet.alerts.grouping import SCOPE_ORDER, Place, Places, is_cause, rack_span
from fleet.alerts.models import AlertGroup, AlertInstance
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

__all__ = (
    "dashboard_url",
    "gpu_hours_words",
    "group_notice",
    "incident_summary",
    "placeholders",
    "recovered_notice",
    "render_summary",
)

_SLOWDOWN_SIGNALS = frozenset({"hw_thermal_slowdown", "sw_thermal_slowdown"})


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
        title, where, cause = _loop_story(group, ordered, places, kind == "resolved")
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
        if group.key.startswith("workload:"):  # one workload's GPUs: who holds them leads
            title = f"{lead.rule.name}: {_holder_words(lead)} holds {_count(by_entity)}"
            title += f" in {_common_place(ordered, places)}"
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
        owner=_common_owner(ordered),
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
    rack, feed = place.names.get("rack"), place.names.get("feed")
    name = f"{rack} feed {feed}" if rack and feed else f"rack {rack}" if rack else ""
    return name or place.where().label(), summary


def _still_open_words(still: list[AlertInstance], places: Places) -> str:
    """What the cause left behind: "33 GPUs off the bus in A01–A02 — reset needed",
    nodes silent, GPUs still hot."""
    parts: list[str] = []
    lost = [m for m in still if consequences.is_off_the_bus(m.scope, m.rule.signal)]
    if lost:
        span = rack_span(_rack_names(lost, places))
        parts.append(f"{gpus_off_the_bus_words(len({m.entity for m in lost}))} in {span}")
        parts[-1] += f" — {RESET_NEEDED}"
    down = [m for m in still if consequences.is_node_down(m.scope, m.rule.signal)]
    if down:
        parts.append(_nodes_silent_words(down, places))
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
    """For a resolved incident of several GPUs, or with one off the bus: "64 GPUs affected;
    33 GPUs off the bus, 2.7 GPU-hours lost" (off the bus: from each lost GPU's first
    off-the-bus alert firing to its last resolving). How long it lasted is the message's
    own "Lasted"."""
    fired = [m for m in members if m.fired_at is not None]
    gpus = {m.entity for m in fired if m.scope == "gpu"}
    ended = max((m.resolved_at for m in fired if m.resolved_at is not None), default=None)
    spans: dict[str, tuple[dt.datetime, dt.datetime]] = {}
    for m in fired:
        if m.fired_at is None or not consequences.is_off_the_bus(m.scope, m.rule.signal):
            continue
        end = m.resolved_at or ended or m.fired_at
        first, last = spans.get(m.entity, (m.fired_at, end))
        spans[m.entity] = (min(first, m.fired_at), max(last, end))
    if len(gpus) < 2 and not spans:
        return ""  # one GPU's alert: its own message says it all
    words = [f"{_gpus(len(gpus))} affected"]
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
    group: AlertGroup, ordered: list[AlertInstance], places: Places, resolved: bool = False
) -> tuple[str, Where, str]:
    """Cause, then symptoms: "CDU-1: no pump running, flow 0 L/min → 64 GPUs in A01–A02
    in thermal slowdown"; before any symptom, what the loop cools. The cause line names
    the racks it cools and their GPUs, and while it fails, its alerts (not once resolved:
    rendered at the values they resolved with they would read "no pump running; flow
    114.7 L/min")."""
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
    if len(parts) > 2 and not resolved:
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
        parts.append(_nodes_silent_words(down, places))
    return "; ".join(parts)


def _nodes_silent_words(down: list[AlertInstance], places: Places) -> str:
    nodes = {m.entity for m in down}
    noun = "node" if len(nodes) == 1 else "nodes"
    return f"{len(nodes)} {noun} silent in {rack_span(_rack_names(down, places))}"


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
        unit = _unit(lead)
        out.append(
            Member(
                where=places.of(scope, entity).where(),
                # A flag or an event count reads as a bare "1": the rule's name says it.
                value=lead.value if unit else None,
                since=lead.fired_at or lead.started_at,
                cause=", ".join(dict.fromkeys(i.rule.name for i in insts)),
                unit=unit,
            )
        )
    return tuple(out)


def _holder_words(inst: AlertInstance) -> str:
    """ "ml-research/train-0": the owner and the workload, as the rule pack's summary says."""
    labels = inst.labels or {}
    return "/".join(p for p in (labels.get("owner", ""), labels.get("workload", "")) if p)


def _common_owner(members: list[AlertInstance]) -> str:
    """The owner every member's GPU is held by (what a route's `owner` filter matches), ''
    when they differ or one is held by nobody."""
    owners = {str((m.labels or {}).get("owner", "")) for m in members}
    return owners.pop() if len(owners) == 1 else ""


def _names(inst: AlertInstance, place: Place) -> dict[str, Any]:
    """Summary placeholders naming the entity (a GPU's uuid and model read here: only
    for the few instances a message leads with)."""
    names: dict[str, Any] = dict(place.names)
    spec = inst.rule.signal_spec  # what a signal supplies is kept among the labels
    extra = () if spec is None else spec.placeholders
    names.update({k: v for k, v in (inst.labels or {}).items() if k in extra})
    if inst.scope == "gpu":
        parts = inst.entity.split(":")
        gpu = None
        if len(parts) == 2 and parts[1].isdigit() and parts[0].isdigit():
            gpu = GPU.objects.filter(node_id=int(parts[0]), index=int(parts[1])).first()
            names["gpu"] = int(parts[1])
        names.update(
            gpu_uuid="" if gpu is None else gpu.uuid, gpu_model="" if gpu is None else gpu.model
        )
        labels = inst.labels or {}  # who held it when the alert started (holders.py)
        names.update({k: labels.get(k, "") for k in ("owner", "user", "workload")})
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
