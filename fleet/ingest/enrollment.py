"""Enrolment: a site enrolment token buys a source its own token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agents.protocol import parse_source
from fleet.models import (
    CoolingLoop,
    EnrollmentToken,
    Node,
    Rack,
    Site,
    SourceToken,
    hash_token,
    new_secret,
)


class EnrollmentError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Enrolled:
    source: str
    token: str


def site_for_enrollment_token(plain: str | None) -> Site:
    if not plain:
        raise EnrollmentError(401, "an enrolment token is required")
    found = EnrollmentToken.objects.select_related("site").filter(token_hash=hash_token(plain))
    token = found.first()
    if token is None or not token.usable():
        raise EnrollmentError(401, "the enrolment token is unknown, expired or revoked")
    return token.site


def enroll(enroll_token: str | None, source: str) -> Enrolled:
    """Issue a new token for `source` (revoking any earlier one); source must be in inventory."""
    site = site_for_enrollment_token(enroll_token)
    try:
        kind, name = parse_source(source)
    except ValueError as exc:
        raise EnrollmentError(400, str(exc)) from None
    _require_in_inventory(site, kind, name)
    plain = new_secret(f"fw{kind[0]}")
    with transaction.atomic():
        SourceToken.objects.update_or_create(
            source=source,
            defaults={
                "kind": kind,
                "site": site,
                "token_hash": hash_token(plain),
                "revoked": False,
            },
        )
    return Enrolled(source, plain)


def _require_in_inventory(site: Site, kind: str, name: str) -> None:
    if kind == "node":
        if not Node.objects.filter(name=name, rack__hall__site=site).exists():
            raise EnrollmentError(
                404,
                f"node {name} is not in site {site.slug}'s inventory; "
                "add it in the admin or with import_inventory",
            )
        return
    slug, _, entity = name.partition("/")
    if slug != site.slug:
        raise EnrollmentError(403, f"this enrolment token is for site {site.slug}, not {slug}")
    if kind == "site":
        return
    model: Any = Rack if kind == "rack" else CoolingLoop
    lookup = {"hall__site": site} if kind == "rack" else {"site": site}
    if not entity or not model.objects.filter(name=entity, **lookup).exists():
        raise EnrollmentError(404, f"{kind} {entity} is not in site {site.slug}'s inventory")


def inventory_for_site(site: Site) -> dict[str, Any]:
    """What the simulator and facility agents need to know of a site."""
    racks = Rack.objects.filter(hall__site=site).select_related("hall", "loop")
    return {
        "site": {"slug": site.slug, "name": site.name},
        "racks": [
            {
                "name": r.name,
                "hall": r.hall.name,
                "cooling": r.cooling,
                "budget_kw": r.power_budget_kw,
                "loop": r.loop.name if r.loop else None,
                "feeds": [
                    {"name": f.name, "available_kw": round(f.available_kw, 2), "type": f.type}
                    for f in r.feeds.all()
                ],
            }
            for r in racks.prefetch_related("feeds")
        ],
        "loops": [
            {
                "name": loop.name,
                "capacity_kw": loop.capacity_kw,
                "supply_limit_c": loop.effective_supply_limit_c(),
            }
            for loop in CoolingLoop.objects.filter(site=site)
        ],
        "nodes": [
            {
                "name": n.name,
                "rack": n.rack.name,
                "gpus": [{"index": g.index, "model": g.model} for g in n.gpus.all()],
            }
            for n in Node.objects.filter(rack__hall__site=site)
            .select_related("rack")
            .prefetch_related("gpus")
            .order_by("rack__hall__name", "rack__position", "rack__name", "position", "name")
        ],
        "meters": [{"name": m.name, "role": m.role} for m in site.meters.all()],
    }
