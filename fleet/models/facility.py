"""Facility meters: the inputs of PUE."""

from __future__ import annotations

from django.db import models

from fleet.choices import MeterRoleChoices, PueCategoryChoices
from fleet.models.sites import Site

__all__ = ("FacilityMeter", "pue_category_for_roles")


class FacilityMeter(models.Model):
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="meters")
    name = models.CharField(max_length=100)
    role = models.CharField(max_length=16, choices=MeterRoleChoices.choices)

    class Meta:
        ordering = ("site", "name")
        constraints = [models.UniqueConstraint(fields=("site", "name"), name="meter_unique")]

    def __str__(self) -> str:
        return f"{self.site.slug}/{self.name} ({self.get_role_display()})"


def pue_category_for_roles(roles: set[str]) -> int | None:
    """The ISO/IEC 30134-2 category a site's meters allow: the best IT metering point wins.

    None when there is no utility meter or no IT meter (no PUE can be stated).
    """
    if MeterRoleChoices.UTILITY not in roles:
        return None
    if MeterRoleChoices.IT_INPUT in roles:
        return int(PueCategoryChoices.CAT3)
    if MeterRoleChoices.PDU_OUTPUT in roles:
        return int(PueCategoryChoices.CAT2)
    if MeterRoleChoices.UPS_OUTPUT in roles:
        return int(PueCategoryChoices.CAT1)
    return None
