"""The alerts page's content: active alerts with whether they are acknowledged or muted,
the silences and maintenance windows in force, recent notifications, Slack routes and the
delivery log. Plain data for the template; every query bounded.

Someone who sees only some sites (fleet/access.py) gets only those sites' alerts, windows,
notifications and deliveries, the routes of those sites and of every site, and the
silences pinned to those sites with `site=<name>`; an alert whose entity has no site (its
place was deleted) only to those who see every site."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Prefetch, Q, QuerySet
from django.urls import reverse

from dashboard.incidents import incidents_of
from dashboard.muting import silence_sites
from fleet import health
from fleet.access import can_operate
from fleet.alerts.models import (
    ACTIVE_STATES,
    AlertGroup,
    AlertInstance,
    MaintenanceWindow,
    Silence,
)
from fleet.alerts.muting import Mutes, matchers_text
from fleet.models import GPU, Site
from fleet.notifications.models import Delivery, DeliveryAttempt, Route

__all__ = ("ActiveAlert", "alerts_page", "can_acknowledge")

# Folded into incidents, so a large one reads as one line; its rows are one click away.
MAX_ACTIVE = 1000
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
    site_id: int | None = None
    operable: bool = False  # the viewer may acknowledge it (operator at its site)
    silence_matchers: str = ""  # the lines a "silence like this" form starts from
    entity_url: str = ""  # the page of what breached: GPU, node, rack, loop or site
    labels: Mapping[str, Any] = field(default_factory=dict)  # its place's names, its incident


def can_acknowledge(user: Any) -> bool:
    """Operators at one site or more (fleet/access.py): the page offers them the controls,
    and each acknowledgement is checked against its alert's site."""
    return can_operate(user)


def alerts_page(
    now: dt.datetime,
    *,
    show_urls: bool,
    sites: Collection[int] | None = None,
    operated: Collection[int] | None = (),
) -> dict[str, Any]:
    """The page for someone who sees `sites` and operates at `operated` (None: every site)."""
    mutes = Mutes.at(now)
    active = (
        _at_sites(AlertInstance.objects.filter(state__in=ACTIVE_STATES), sites, "site")
        .select_related("rule")
        .order_by("state", "-started_at")[:MAX_ACTIVE]
    )
    gpus = _gpu_pks(inst for inst in active if inst.scope == "gpu")
    rows = [_active(inst, mutes, operated, gpus) for inst in active]
    rows.sort(key=lambda a: (a.state != "firing", _rank(a.severity), a.since))
    incidents, loose = incidents_of(active, {row.pk: row for row in rows}, operated)
    return {
        "now": now,
        "active": rows,
        "incidents": incidents,
        "loose": loose,  # active alerts in no incident (yet), folded by rule
        "truncated": len(rows) >= MAX_ACTIVE,
        "firing": sum(1 for a in rows if a.state == "firing"),
        "pending": sum(1 for a in rows if a.state == "pending"),
        "acknowledged": sum(1 for a in rows if a.acknowledged),
        "muted": sum(1 for a in rows if a.muted),
        "silences": _silences(now, sites),
        "windows": list(
            MaintenanceWindow.objects.filter(ends_at__gt=now)
            .filter(_window_at_sites(sites))
            .select_related("site", "rack__hall__site", "node")
            .order_by("starts_at")[:MAX_RECENT]
        ),
        "groups": list(
            _at_sites(AlertGroup.objects.filter(messages__gt=0), sites, "site")
            .annotate(size=Count("members"))
            .order_by("-last_sent_at")[:MAX_RECENT]
        ),
        "routes": [
            _route(r, show_urls)
            for r in Route.objects.filter(_every_or(sites, "site")).select_related("site")
        ],
        "deliveries": list(
            _at_sites(Delivery.objects.all(), sites, "route__site")
            .select_related("route")
            .prefetch_related(
                Prefetch("tries", queryset=DeliveryAttempt.objects.order_by("started_at"))
            )
            .order_by("-created_at")[:MAX_RECENT]
        ),
    }


def _at_sites(queryset: QuerySet[Any], sites: Collection[int] | None, path: str) -> Any:
    return queryset if sites is None else queryset.filter(**{f"{path}__in": sites})


def _every_or(sites: Collection[int] | None, path: str) -> Q:
    # Rows for every site (no site set) are everyone's; the rest only their sites'.
    return Q() if sites is None else Q(**{f"{path}__isnull": True}) | Q(**{f"{path}__in": sites})


def _window_at_sites(sites: Collection[int] | None) -> Q:
    if sites is None:
        return Q()
    return Q(site__in=sites) | Q(rack__hall__site__in=sites) | Q(node__rack__hall__site__in=sites)


def _silences(now: dt.datetime, sites: Collection[int] | None) -> list[dict[str, Any]]:
    found = Silence.objects.filter(ends_at__gt=now).order_by("starts_at")[: MAX_RECENT * 4]
    names = (
        None
        if sites is None
        else set(Site.objects.filter(pk__in=sites).values_list("name", flat=True))
    )
    rows = [
        {
            "pk": s.pk,
            "matchers": matchers_text(s.matchers),
            "silence": s,
            "in_force": s.starts_at <= now,
            "sites": silence_sites(s.matchers),
        }
        for s in found
        if names is None or silence_sites(s.matchers) & names
    ]
    return rows[:MAX_RECENT]


def _rank(severity: str) -> int:
    """Worst first, by the one order of severities (fleet/health/severity.py)."""
    return -health.severity_rank(severity)


def _gpu_pks(instances: Iterable[AlertInstance]) -> dict[str, int]:
    """The inventory pk of each GPU-scope alert's GPU (entity "node id:index"), one query."""
    keys: set[tuple[int, int]] = set()
    for inst in instances:
        node, _, index = inst.entity.partition(":")
        if node.isdigit() and index.isdigit():
            keys.add((int(node), int(index)))
    if not keys:
        return {}
    found = GPU.objects.filter(node_id__in={n for n, _ in keys}).values_list(
        "node_id", "index", "pk"
    )
    return {f"{n}:{i}": pk for n, i, pk in found if (n, i) in keys}


def _entity_url(inst: AlertInstance, gpus: Mapping[str, int]) -> str:
    """Where to look: the GPU's, node's or rack's page, the loop on the cooling page."""
    if inst.scope == "gpu" and inst.entity in gpus:
        return reverse("gpu", args=[gpus[inst.entity]])
    if inst.node_id is not None:
        return reverse("node", args=[inst.node_id])
    if inst.rack_id is not None:
        return reverse("rack", args=[inst.rack_id])
    if inst.loop_id is not None:
        return reverse("cooling") + f"#loop-{inst.loop_id}"
    return reverse("power") if inst.scope == "site" else ""


def _active(
    inst: AlertInstance,
    mutes: Mutes,
    operated: Collection[int] | None = (),
    gpus: Mapping[str, int] | None = None,
) -> ActiveAlert:
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
        muted=mutes.reason(labels, inst.site_id, inst.rack_id, inst.node_id, inst.loop_id),
        runbook_url=inst.rule.runbook_url,
        site_id=inst.site_id,
        operable=operated is None or inst.site_id in operated,
        silence_matchers=_silence_like(labels),
        entity_url=_entity_url(inst, gpus or {}),
        labels=labels,
    )


def _silence_like(labels: dict[str, Any]) -> str:
    # Pinned to the alert's site (a site's operator may only mute their sites), its rule,
    # and its place down to the rack: the usual scope of planned work.
    keys = ("site", "rule", "loop", "rack", "node")
    return "\n".join(f"{k}={labels[k]}" for k in keys if labels.get(k))


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
        "webhook": route.webhook_shown() if show_urls else "",
    }
