"""Who may see and do what: the one place that answers it for pages, live subscriptions
and actions.

Roles, as an ops team hands them out:

- **viewer** sees a site's pages and alerts;
- **operator** also acknowledges alerts, adds and ends silences and plans maintenance;
- **admin** edits the inventory, alert rules and Slack routes (Django's admin).

Where a role comes from:

- *Fleet-wide*: superusers and staff are admins; the groups "Admins", "Operators" and
  "Viewers" (created by fleet/migrations/0008_role_groups.py) give that role on every site.
  Holding `alerts.change_alertinstance` makes an operator everywhere: that is what the
  "Operators" group carries, and what made an operator before roles per site existed.
- *Per site*: a `SiteRole(user, site, role)` row makes a viewer or operator at one site.
  A person with any such row and no fleet-wide role sees only those sites; other sites'
  pages are a 404 to them, their alerts are not listed and their live groups refused.
- *Nothing at all*: a signed-in person with no group and no row sees no site, and every
  page shows them only whom to ask for access (dashboard/no_role.py). Roles only ever add
  access: removing someone's last site role takes that site away and gives nothing back.

Administering is fleet-wide only: rules and routes apply across sites and the inventory is
edited in Django's admin, which has no per-row permissions; a site role is never "admin".

The answers are worked out once per user object (one request, one WebSocket connection)
and kept on it, as Django keeps its permission cache; a role changed meanwhile applies
from the next request or connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = (
    "ADMINS_GROUP",
    "OPERATORS_GROUP",
    "VIEWERS_GROUP",
    "Roles",
    "can_administer",
    "can_operate",
    "can_view_site",
    "has_any_role",
    "operated_site_ids",
    "roles_of",
    "visible_site_ids",
)

ADMINS_GROUP = "Admins"
OPERATORS_GROUP = "Operators"
VIEWERS_GROUP = "Viewers"
OPERATOR_PERMISSION = "alerts.change_alertinstance"
_CACHE = "_fleet_roles"


@dataclass(frozen=True)
class Roles:
    """One person's roles: fleet-wide ones, and per site (site id → "viewer"/"operator")."""

    signed_in: bool = False
    admin: bool = False
    operator_everywhere: bool = False
    viewer_everywhere: bool = False
    at_sites: dict[int, str] = field(default_factory=dict)


NOBODY = Roles()


def roles_of(user: Any) -> Roles:
    """The person's roles, read once per user object."""
    if user is None or not user.is_authenticated or not user.is_active:
        return NOBODY
    cached = getattr(user, _CACHE, None)
    if isinstance(cached, Roles):
        return cached
    roles = _read_roles(user)
    setattr(user, _CACHE, roles)
    return roles


def _read_roles(user: Any) -> Roles:
    from fleet.models import SiteRole

    groups = set(user.groups.values_list("name", flat=True))
    admin = bool(user.is_superuser or user.is_staff or ADMINS_GROUP in groups)
    operator = admin or OPERATORS_GROUP in groups or user.has_perm(OPERATOR_PERMISSION)
    at_sites = dict(SiteRole.objects.filter(user=user).values_list("site_id", "role"))
    viewer = operator or VIEWERS_GROUP in groups
    return Roles(
        signed_in=True,
        admin=admin,
        operator_everywhere=operator,
        viewer_everywhere=viewer,
        at_sites=at_sites,
    )


def has_any_role(user: Any) -> bool:
    """Whether the person may see anything at all: a fleet-wide role or a site role."""
    roles = roles_of(user)
    return roles.admin or roles.viewer_everywhere or bool(roles.at_sites)


def visible_site_ids(user: Any) -> set[int] | None:
    """The sites `user` may see, or None for every site."""
    roles = roles_of(user)
    if not roles.signed_in:
        return set()
    if roles.viewer_everywhere:
        return None
    return set(roles.at_sites)


def can_view_site(user: Any, site_id: int) -> bool:
    sites = visible_site_ids(user)
    return sites is None or site_id in sites


def operated_site_ids(user: Any) -> set[int] | None:
    """The sites where `user` operates, or None for every site."""
    roles = roles_of(user)
    if roles.operator_everywhere:
        return None
    return {site for site, role in roles.at_sites.items() if role == "operator"}


def can_operate(user: Any, site_id: int | None = None) -> bool:
    """Acknowledge, silence and plan maintenance at `site_id`; with None, whether the
    person operates at one site at least (to offer the controls: each action then checks
    the site it touches)."""
    sites = operated_site_ids(user)
    if sites is None:
        return True
    return bool(sites) if site_id is None else site_id in sites


def can_administer(user: Any) -> bool:
    """Inventory, rules and routes."""
    return roles_of(user).admin
