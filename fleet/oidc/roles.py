"""A company account's roles, set from the provider's group claim at every sign-in.

The claim is the whole truth for these accounts: the fleet-wide role groups ("Admins",
"Operators", "Viewers") and `SiteRole` rows are made to say exactly what the mapped groups
grant, so a group removed at the provider takes its role away at the next sign-in, and a
person whose groups grant nothing is left with no role (fleet/access.py). Other Django
groups, staff and superuser status are local decisions and are left as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import Group
from django.db import transaction

from fleet.access import ADMINS_GROUP, OPERATORS_GROUP, VIEWERS_GROUP
from fleet.models import Site, SiteRole
from fleetwatch.oidc_settings import ROLES, RoleGrant

__all__ = ("Granted", "granted_roles", "groups_in_claim", "sync_roles")

log = logging.getLogger(__name__)

ROLE_GROUPS = {"viewer": VIEWERS_GROUP, "operator": OPERATORS_GROUP, "admin": ADMINS_GROUP}


@dataclass(frozen=True)
class Granted:
    """What a person's groups grant: the highest fleet-wide role, and per site slug."""

    everywhere: str | None = None
    at_sites: dict[str, str] = field(default_factory=dict)


def groups_in_claim(claims: Mapping[str, Any], claim: str) -> list[str]:
    """The claim's group names: a list of strings (or one string); absent means none."""
    value = claims.get(claim)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [g for g in value if isinstance(g, str)]
    return []


def granted_roles(groups: Iterable[str], role_map: Mapping[str, tuple[RoleGrant, ...]]) -> Granted:
    everywhere: str | None = None
    at_sites: dict[str, str] = {}
    for grant in (g for group in groups for g in role_map.get(group, ())):
        if grant.site_slug is None:
            everywhere = _higher(everywhere, grant.role)
        else:
            at_sites[grant.site_slug] = _higher(at_sites.get(grant.site_slug), grant.role)
    return Granted(everywhere, at_sites)


def _higher(held: str | None, role: str) -> str:
    return role if held is None or ROLES.index(role) > ROLES.index(held) else held


@transaction.atomic
def sync_roles(user: Any, granted: Granted) -> None:
    _sync_role_group(user, granted.everywhere)
    _sync_site_roles(user, granted.at_sites)


def _sync_role_group(user: Any, role: str | None) -> None:
    groups = {g.name: g for g in Group.objects.filter(name__in=ROLE_GROUPS.values())}
    wanted = ROLE_GROUPS[role] if role else None
    user.groups.remove(*(g for name, g in groups.items() if name != wanted))
    if wanted is None:
        return
    if wanted not in groups:
        # Made by fleet/migrations/0008_role_groups.py; only someone deleting it gets here.
        log.error("company sign-in: group %r does not exist; %s gets no role", wanted, user)
        return
    user.groups.add(groups[wanted])


def _sync_site_roles(user: Any, at_slugs: Mapping[str, str]) -> None:
    sites = dict(Site.objects.filter(slug__in=at_slugs).values_list("slug", "id"))
    for slug in sorted(set(at_slugs) - set(sites)):
        log.warning(
            "company sign-in: FLEETWATCH_OIDC_ROLE_MAP names site %r, which does not exist", slug
        )
    wanted = {sites[slug]: role for slug, role in at_slugs.items() if slug in sites}
    SiteRole.objects.filter(user=user).exclude(site_id__in=wanted).delete()
    for site_id, role in wanted.items():
        SiteRole.objects.update_or_create(user=user, site_id=site_id, defaults={"role": role})
