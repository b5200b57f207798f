"""Roles in the admin, and the admin site itself: Fleetwatch's name on it, one sign-in
page for everyone, and the "Admins" group let in (fleet/access.py)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from fleet.access import can_administer
from fleet.models import SiteRole
from fleetwatch.public import public

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[Any]
    TabularInline = admin.TabularInline[Any, Any]
    BaseUserAdmin = UserAdmin[Any]
else:
    ModelAdmin = admin.ModelAdmin
    TabularInline = admin.TabularInline
    BaseUserAdmin = UserAdmin


def brand_admin_site(site: admin.AdminSite) -> None:
    """Fleetwatch's name where Django's would be, and the dashboard's sign-in page.

    The admin's login is the project's only one (settings.LOGIN_URL). It takes any active
    account, not only staff, so viewers and operators sign in there too; the admin pages
    themselves still let in only those who may administer."""
    site.site_header = "Fleetwatch inventory"
    site.site_title = "Fleetwatch"
    site.index_title = "Sites, racks, rules and routes"
    site.site_url = "/"
    site.login_form = AuthenticationForm
    site.login_template = "registration/login.html"
    site.has_permission = _may_administer  # type: ignore[method-assign]
    site.login = public(partial(_sign_in, site))  # type: ignore[method-assign]


def _may_administer(request: HttpRequest) -> bool:
    # Signing out goes through the admin's logout, the project's only one: anyone signed
    # in may use that page, though only admins may use the rest.
    if request.path == reverse("admin:logout"):
        return bool(request.user.is_authenticated)
    return can_administer(request.user)


def _sign_in(
    site: admin.AdminSite, request: HttpRequest, extra_context: dict[str, Any] | None = None
) -> HttpResponse:
    # Without a destination, land on the fleet overview, which everyone may open (the
    # admin's index, Django's default, would turn away all but admins).
    if REDIRECT_FIELD_NAME not in request.GET and REDIRECT_FIELD_NAME not in request.POST:
        extra_context = {**(extra_context or {}), REDIRECT_FIELD_NAME: "/"}
    return admin.AdminSite.login(site, request, extra_context)


brand_admin_site(admin.site)


@admin.register(SiteRole)
class SiteRoleAdmin(ModelAdmin):
    """Who sees or operates which site. Fleet-wide roles are the groups "Viewers",
    "Operators" and "Admins" (Authentication and authorization → Groups)."""

    list_display = ("user", "site", "role")
    list_filter = ("site", "role")
    search_fields = ("user__username", "site__slug", "site__name")
    list_select_related = ("user", "site")
    autocomplete_fields = ("user",)


class SiteRoleInline(TabularInline):
    model = SiteRole
    fields = ("site", "role")
    extra = 0
    verbose_name_plural = "roles at single sites (any row limits the person to those sites)"


# A person's site roles on their own page, where an admin looks first.
admin.site.unregister(User)


@admin.register(User)
class PersonAdmin(BaseUserAdmin):
    inlines = (*BaseUserAdmin.inlines, SiteRoleInline)
