"""Who may see and do what: the one place that answers it for pages, live subscriptions
and actions.

Roles: viewer (sees), operator (acknowledge, silence, maintenance), admin (inventory,
rules, routes). Scaffold: every signed-in user sees every site; operators are those with
`alerts.change_alertinstance`; admins are staff. Per-site roles replace this.
"""

from __future__ import annotations

from typing import Any

__all__ = ("can_administer", "can_operate", "can_view_site", "visible_site_ids")


def visible_site_ids(user: Any) -> set[int] | None:
    """The sites `user` may see, or None for every site."""
    if user is None or not user.is_authenticated:
        return set()
    return None


def can_view_site(user: Any, site_id: int) -> bool:
    sites = visible_site_ids(user)
    return sites is None or site_id in sites


def can_operate(user: Any, site_id: int | None = None) -> bool:
    """Acknowledge, silence and plan maintenance (at `site_id`, or anywhere when None)."""
    if user is None or not user.is_authenticated:
        return False
    if site_id is not None and not can_view_site(user, site_id):
        return False
    return bool(user.has_perm("alerts.change_alertinstance"))


def can_administer(user: Any) -> bool:
    """Inventory, rules and routes."""
    return bool(user is not None and user.is_authenticated and user.is_staff)
