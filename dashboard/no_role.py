"""A signed-in person with no role sees one page: that they have no access yet, and whom
to ask (fleet/access.py: roles only ever add access).

Every view but the public ones (fleetwatch/public.py) and signing out answers them with
it, so a new page cannot show such a person anything. The contact is
FLEETWATCH_ACCESS_CONTACT when set, else the admins' names and e-mail addresses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from fleet.access import ADMINS_GROUP, has_any_role
from fleetwatch.errors import error_response, wants_json

# Enough names to find someone at work; the rest are one click away for any of them.
MAX_ADMINS_NAMED = 5


def whom_to_ask() -> tuple[str, list[str]]:
    """The configured contact, or the admins as "Name <email>" (the contact then empty)."""
    if settings.ACCESS_CONTACT:
        return settings.ACCESS_CONTACT, []
    admins = (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(Q(is_superuser=True) | Q(is_staff=True) | Q(groups__name=ADMINS_GROUP))
        .distinct()
        .order_by("username")[:MAX_ADMINS_NAMED]
    )
    return "", [_named(admin) for admin in admins]


def _named(user: Any) -> str:
    name = user.get_full_name() or user.get_username()
    return f"{name} <{user.email}>" if user.email else name


def no_role_page(request: HttpRequest) -> HttpResponse:
    contact, admins = whom_to_ask()
    if wants_json(request):
        who = contact or ", ".join(admins) or "an administrator of this Fleetwatch"
        return error_response(request, 403, f"no role yet: ask {who}", field="role")
    context = {"contact": contact, "admins": admins}
    return render(request, "dashboard/no_role.html", context, status=403)


class NoRoleMiddleware:
    """After the sign-in check: a signed-in person with no role gets `no_role_page`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view: Callable[..., Any], args: Any, kwargs: Any
    ) -> HttpResponse | None:
        if not getattr(view, "login_required", True):
            return None  # public: guarded by its own rule
        if not request.user.is_authenticated or has_any_role(request.user):
            return None
        if request.path == reverse("admin:logout"):
            return None  # signing out stays possible
        return no_role_page(request)
