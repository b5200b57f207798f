"""Cooling loops and their CDUs."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from fleet.choices import LiquidClassChoices
from fleet.models.sites import Site

__all__ = ("CoolingLoop",)


class CoolingLoop(models.Model):
    """A secondary liquid loop served by one CDU (Redfish `CoolingUnit`, EquipmentType CDU)."""

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="loops")
    name = models.CharField(max_length=100, help_text="e.g. CDU-1")
    capacity_kw = models.FloatField(help_text="rated heat-removal capacity (kW)")
    liquid_class = models.CharField(
        max_length=4, choices=LiquidClassChoices.choices, blank=True, help_text="ASHRAE W-class"
    )
    supply_limit_c = models.FloatField(
        null=True, blank=True, help_text="max secondary supply temperature (°C); W-class default"
    )
    rated_flow_lpm = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ("site", "name")
        constraints = [models.UniqueConstraint(fields=("site", "name"), name="loop_unique_in_site")]

    def __str__(self) -> str:
        return f"{self.site.slug}/{self.name}"

    @property
    def source(self) -> str:
        return f"loop:{self.site.slug}/{self.name}"

    def effective_supply_limit_c(self) -> float | None:
        if self.supply_limit_c is not None:
            return self.supply_limit_c
        return LiquidClassChoices.supply_limit_c(self.liquid_class)

    def clean(self) -> None:
        if self.capacity_kw is not None and self.capacity_kw <= 0:
            raise ValidationError({"capacity_kw": "a loop's capacity must be positive"})
        if self.supply_limit_c is not None and not 5 <= self.supply_limit_c <= 70:
            raise ValidationError({"supply_limit_c": "supply limit must be within 5–70 °C"})
        if self.rated_flow_lpm is not None and self.rated_flow_lpm <= 0:
            raise ValidationError({"rated_flow_lpm": "rated flow must be positive"})
