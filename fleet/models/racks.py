"""Racks, their power feeds and budgets (power modelled after NetBox's dcim/power.py)."""

from __future__ import annotations

import math

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from fleet.choices import PowerFeedPhaseChoices, PowerFeedTypeChoices, RackCoolingChoices
from fleet.models.cooling import CoolingLoop
from fleet.models.sites import Hall

__all__ = ("PowerFeed", "Rack")

SQRT3 = math.sqrt(3)


class Rack(models.Model):
    hall = models.ForeignKey(Hall, on_delete=models.CASCADE, related_name="racks")
    name = models.CharField(max_length=100, help_text="unique within the site, e.g. A01")
    cooling = models.CharField(
        max_length=16, choices=RackCoolingChoices.choices, default=RackCoolingChoices.AIR
    )
    power_budget_kw = models.FloatField(help_text="the power this rack may draw (kW)")
    loop = models.ForeignKey(
        CoolingLoop,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="racks",
        help_text="the liquid loop that cools it (liquid-cooled racks)",
    )
    position = models.PositiveIntegerField(default=0, help_text="order along the row")

    class Meta:
        ordering = ("hall", "position", "name")

    def __str__(self) -> str:
        return f"{self.hall.site.slug}/{self.name}"

    @property
    def site_id_(self) -> int:
        return self.hall.site_id

    @property
    def source(self) -> str:
        return f"rack:{self.hall.site.slug}/{self.name}"

    def feed_capacity_kw(self) -> float:
        """Usable kW of the primary feeds: a redundant feed adds resilience, not capacity."""
        feeds = [f for f in self.feeds.all() if f.type == PowerFeedTypeChoices.PRIMARY]
        return sum(f.available_kw for f in feeds)

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.power_budget_kw is not None and self.power_budget_kw <= 0:
            errors["power_budget_kw"] = "a rack's power budget must be positive"
        liquid = self.cooling in RackCoolingChoices.liquid()
        if liquid and self.cooling != RackCoolingChoices.REAR_DOOR and self.loop_id is None:
            errors["loop"] = f"a {self.get_cooling_display()} rack needs the loop that cools it"
        if self.cooling == RackCoolingChoices.AIR and self.loop_id is not None:
            errors["loop"] = "an air-cooled rack is not on a liquid loop"
        # A rack can only be cooled by plant in its own site.
        loop = self.loop if self.loop_id is not None else None
        if loop is not None and self.hall_id is not None and loop.site_id != self.hall.site_id:
            errors["loop"] = "the loop must be in the rack's site"
        if self.hall_id is not None and self.name:
            clash = Rack.objects.filter(hall__site_id=self.hall.site_id, name=self.name)
            if clash.exclude(pk=self.pk).exists():
                errors["name"] = f"rack {self.name} already exists in {self.hall.site.slug}"
        if self.pk and self.power_budget_kw:
            capacity = self.feed_capacity_kw()
            if capacity and self.power_budget_kw > capacity:
                errors["power_budget_kw"] = (
                    f"budget {self.power_budget_kw:g} kW exceeds its primary feeds' "
                    f"{capacity:.1f} kW"
                )
        if errors:
            raise ValidationError(errors)


class PowerFeed(models.Model):
    """A circuit feeding a rack. Available power = V × A × max utilisation (× √3 three-phase)."""

    rack = models.ForeignKey(Rack, on_delete=models.CASCADE, related_name="feeds")
    name = models.CharField(max_length=50, help_text="e.g. A or B")
    type = models.CharField(
        max_length=16, choices=PowerFeedTypeChoices.choices, default=PowerFeedTypeChoices.PRIMARY
    )
    phase = models.CharField(
        max_length=8, choices=PowerFeedPhaseChoices.choices, default=PowerFeedPhaseChoices.THREE
    )
    voltage = models.PositiveIntegerField(default=415, help_text="line-to-line for three phase (V)")
    amperage = models.PositiveIntegerField(default=63, help_text="breaker rating (A)")
    max_utilization = models.PositiveSmallIntegerField(
        default=80,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="% of the breaker rating that may be drawn continuously",
    )

    class Meta:
        ordering = ("rack", "name")
        constraints = [models.UniqueConstraint(fields=("rack", "name"), name="feed_unique_in_rack")]

    def __str__(self) -> str:
        return f"{self.rack} feed {self.name}"

    @property
    def available_kw(self) -> float:
        watts = self.voltage * self.amperage * self.max_utilization / 100
        if self.phase == PowerFeedPhaseChoices.THREE:
            watts *= SQRT3
        return watts / 1000

    def clean(self) -> None:
        if self.max_utilization is not None and not 1 <= self.max_utilization <= 100:
            raise ValidationError({"max_utilization": "must be 1–100 %"})
        if self.voltage is not None and not 100 <= self.voltage <= 1000:
            raise ValidationError({"voltage": "must be within 100–1000 V"})
        if self.amperage is not None and not 1 <= self.amperage <= 2000:
            raise ValidationError({"amperage": "must be within 1–2000 A"})
