"""The alerts page's incidents: each open group (fleet/alerts/grouping.py) with its cause,
its symptoms and its consequences, members folded by rule with their count (the rows
themselves one click away), severity the worst member's — so one failure reads as one
incident, not 320 rows. Active alerts in no group (pending ones: a group is joined on
firing) are folded by rule the same way.

Also what acting on an incident needs: the silence that mutes it (`incident=<group key>`,
the label every member carries, pinned to its site), and the place a maintenance window
would cover where the incident has one (a rack's incident: its rack; a site's: its site).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.urls import reverse
from django.utils.http import urlencode
from django.utils.text import slugify

from fleet import health
from fleet.alerts.consequences import is_consequence
from fleet.alerts.grouping import INCIDENT_LABEL, is_cause, rack_span
from fleet.alerts.models import AlertGroup, AlertInstance

__all__ = ("Fold", "Incident", "fold_members", "incidents_of")

# The order an incident lists its members in, and how it names each part.
ROLES = ("cause", "symptoms", "consequences", "alerts")
ROLE_WORDS = {
    "cause": "Cause",
    "symptoms": "Symptoms",
    "consequences": "Consequences",
    "alerts": "Alerts",
}
# Outside an incident, a fold this small shows its rows at once (folding one or two
# alerts hides nothing); an incident's folds stay closed, its card says what they hold.
OPEN_UP_TO = 3


@dataclass
class Fold:
    """One rule's members in one part of an incident: "64 × GPU thermal slowdown in A01–A02"."""

    role: str
    rule: str
    severity: str
    members: list[Any] = field(default_factory=list)  # dashboard.alerts.ActiveAlert rows

    @property
    def count(self) -> int:
        return len(self.members)

    @property
    def firing(self) -> int:
        return sum(1 for m in self.members if m.state == "firing")

    @property
    def where(self) -> str:
        racks = [m.labels.get("rack") for m in self.members if m.labels.get("rack")]
        if racks:
            return rack_span(str(r) for r in racks)
        places = sorted({m.where for m in self.members})
        return places[0] if len(places) == 1 else f"{len(places)} places"

    @property
    def open(self) -> bool:
        return self.count <= OPEN_UP_TO

    @property
    def anchor(self) -> str:
        """Its element's id within its incident: the page's refresh keeps an opened fold
        open only while it is the same fold."""
        return slugify(f"{self.role}-{self.rule}")

    @property
    def words(self) -> str:
        states = (
            f"{self.firing} firing"
            if self.firing == self.count
            else (f"{self.firing} firing, {self.count - self.firing} pending")
        )
        return f"{self.count} × {self.rule} at {self.where} ({states})"


@dataclass
class Incident:
    pk: int
    key: str
    title: str
    severity: str
    opened_at: dt.datetime
    site_id: int | None
    site_name: str
    folds: list[Fold]
    operable: bool  # the viewer operates its site
    silence_url: str
    maintenance_url: str  # "" when the incident has no place a window covers
    maintenance_words: str  # "rack A01"

    @property
    def size(self) -> int:
        return sum(f.count for f in self.folds)

    @property
    def firing(self) -> int:
        return sum(f.firing for f in self.folds)

    @property
    def unacknowledged(self) -> int:
        return sum(1 for f in self.folds for m in f.members if not m.acknowledged)

    def parts(self) -> list[tuple[str, list[Fold]]]:
        """(its words, folds) per part, cause first."""
        return [
            (ROLE_WORDS[role], [f for f in self.folds if f.role == role])
            for role in ROLES
            if any(f.role == role for f in self.folds)
        ]


def worst_severity(severities: Iterable[str]) -> str:
    return health.worst_severity(severities)


def _urgency(severity: str) -> int:
    """Sorts worst first, by the one order of severities (fleet/health/severity.py)."""
    return -health.severity_rank(severity)


def fold_members(rows: Iterable[Any], role_of: Mapping[int, str] | None = None) -> list[Fold]:
    """Rows folded by (part, rule), worst severity first, then the largest fold."""
    folds: dict[tuple[str, str], Fold] = {}
    for row in rows:
        role = (role_of or {}).get(row.pk, "alerts")
        fold = folds.setdefault((role, row.rule), Fold(role, row.rule, row.severity))
        fold.members.append(row)
    return sorted(
        folds.values(),
        key=lambda f: (ROLES.index(f.role), _urgency(f.severity), -f.count, f.rule),
    )


def role(group_key: str, inst: AlertInstance) -> str:
    """What a member is to its incident: its cause (the group's key is its own), a
    consequence (a GPU off the bus, a node gone silent that joined the cause), or a
    symptom (a thermal alert under its loop's incident)."""
    if is_cause(group_key, inst):
        return "cause"
    return "consequences" if is_consequence(inst.scope, inst.rule.signal) else "symptoms"


def incidents_of(
    instances: Iterable[AlertInstance],
    rows: Mapping[int, Any],
    operated: Collection[int] | None,
) -> tuple[list[Incident], list[Fold]]:
    """The open incidents the `instances` (active, rule selected) belong to, and the
    folds of those in no group. `rows`: each instance's ActiveAlert by pk."""
    grouped: dict[int, list[AlertInstance]] = {}
    loose: list[Any] = []
    for inst in instances:
        if inst.group_id is None:
            loose.append(rows[inst.pk])
        else:
            grouped.setdefault(inst.group_id, []).append(inst)
    groups = AlertGroup.objects.filter(pk__in=grouped).select_related("site")
    out = [_incident(g, grouped[g.pk], rows, operated) for g in groups]
    out.sort(key=lambda i: (_urgency(i.severity), -i.size, i.opened_at))
    return out, fold_members(loose)


def _incident(
    group: AlertGroup,
    members: list[AlertInstance],
    rows: Mapping[int, Any],
    operated: Collection[int] | None,
) -> Incident:
    folds = fold_members((rows[m.pk] for m in members), {m.pk: role(group.key, m) for m in members})
    causes = [f for f in folds if f.role == "cause"] or folds
    title = group.title or f"{causes[0].rule} at {causes[0].where}"
    site_name = group.site.name if group.site is not None else ""
    maintenance_url, maintenance_words = _maintenance(group, members)
    return Incident(
        pk=group.pk,
        key=group.key,
        title=title,
        severity=worst_severity(f.severity for f in folds),
        opened_at=group.opened_at,
        site_id=group.site_id,
        site_name=site_name,
        folds=folds,
        operable=operated is None or group.site_id in operated,
        silence_url=silence_url(group.key, site_name),
        maintenance_url=maintenance_url,
        maintenance_words=maintenance_words,
    )


def silence_url(group_key: str, site_name: str) -> str:
    """The silence form, filled in to mute the whole incident: every member carries the
    label `incident=<group key>`; pinned to its site (a site's operator mutes only theirs)."""
    lines = [f"site={site_name}"] if site_name else []
    lines.append(f"{INCIDENT_LABEL}={group_key}")
    return reverse("silence-new") + "?" + urlencode({"matchers": "\n".join(lines)})


def _maintenance(group: AlertGroup, members: list[AlertInstance]) -> tuple[str, str]:
    """Where a maintenance window for the incident goes: its loop (a loop's incident: the
    window covers the loop and the racks it cools), its rack (a rack's) or its site (a
    site's)."""
    kind, _, rest = group.key.partition(":")
    url = reverse("maintenance-new")
    if kind == "loop" and rest.isdigit():
        name = next((str(m.labels.get("loop")) for m in members if m.labels.get("loop")), "")
        return f"{url}?{urlencode({'loop': rest})}", f"{name or 'loop ' + rest} and what it cools"
    if kind == "rack":
        rack_id = rest.split(":", 1)[0]
        name = next((str(m.labels.get("rack")) for m in members if m.labels.get("rack")), "")
        if rack_id.isdigit():
            return f"{url}?{urlencode({'rack': rack_id})}", f"rack {name or rack_id}"
    if kind == "site" and group.site_id is not None:
        name = group.site.name if group.site is not None else str(group.site_id)
        return f"{url}?{urlencode({'site': group.site_id})}", f"site {name}"
    return "", ""
