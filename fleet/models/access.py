"""Who holds which role at which site: `SiteRole` rows (the per-site half of fleet/access.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from fleet.models.sites import Site

__all__ = ("SiteRole", "SiteRoleChoices")


class SiteRoleChoices(models.TextChoices):
    """What a person may do at one site. Administering (inventory, rules, routes) is
    fleet-wide and comes from the "Admins" group or staff status, never from a site row."""

    VIEWER = "viewer", "Viewer (sees)"
    OPERATOR = "operator", "Operator (acknowledges, silences, plans maintenance)"


class SiteRole(models.Model):
    """One person's role at one site; a person with any of these and no fleet-wide role
    sees only the sites named in them."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name="person",
        on_delete=models.CASCADE,
        related_name="site_roles",
    )
    site = models.ForeignKey(
        Site, verbose_name="site", on_delete=models.CASCADE, related_name="roles"
    )
    role = models.CharField(
        verbose_name="role",
        max_length=8,
        choices=SiteRoleChoices.choices,
        default=SiteRoleChoices.VIEWER,
    )

    class Meta:
        verbose_name = "site role"
        ordering = ("site", "user")
        constraints = [
            models.UniqueConstraint(fields=("user", "site"), name="fleet_siterole_one_per_site")
        ]

    def __str__(self) -> str:
        return f"{self.user} — {self.role} at {self.site}"
