"""Sites and halls: where racks stand."""

from __future__ import annotations

import zoneinfo

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

__all__ = ("GridIntensity", "Hall", "IdleEnergyTo", "Site")

slug_validator = RegexValidator(r"^[a-z0-9][a-z0-9-]*$", "lower-case letters, digits and dashes")


def validate_timezone(value: str) -> None:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError(f"{value!r} is not an IANA time zone (e.g. Europe/London)") from None


class IdleEnergyTo(models.TextChoices):
    """Who the energy ledger charges the energy of GPUs held and idle (docs/ledger.md)."""

    OWNER = "owner", "the job holding them"
    POOL = "pool", "the site's pool"


class Site(models.Model):
    slug = models.CharField(max_length=50, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=100)
    timezone = models.CharField(max_length=64, default="UTC", validators=[validate_timezone])
    # What the energy ledger (fleet/read/ledger.py) prices and weighs a site's energy at:
    # constants, blank where unknown (the ledger then leaves carbon or cost out).
    grid_gco2_per_kwh = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        verbose_name="grid carbon intensity (gCO2/kWh)",
        help_text="the grid's carbon intensity at this site, a constant",
    )
    tariff_per_kwh = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        verbose_name="energy tariff (per kWh)",
        help_text="what a kWh costs at this site, in the site's currency",
    )
    gpu_hour_price = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        verbose_name="GPU-hour price",
        help_text="optional: charged per GPU-hour held, on top of energy",
    )
    currency = models.CharField(max_length=3, blank=True, help_text="ISO 4217 code, e.g. EUR")
    idle_energy_to = models.CharField(
        max_length=8,
        choices=IdleEnergyTo.choices,
        default=IdleEnergyTo.OWNER,
        # in the table too: a row written without the ORM (a bench, a script) gets it
        db_default=IdleEnergyTo.OWNER,
        verbose_name="idle energy charged to",
        help_text="allocated-but-idle and idle-held-memory energy: the job's owner, or the pool",
    )

    class Meta:
        ordering = ("slug",)

    def __str__(self) -> str:
        return self.name


class Hall(models.Model):
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="halls")
    name = models.CharField(max_length=100)

    class Meta:
        ordering = ("site", "name")
        constraints = [models.UniqueConstraint(fields=("site", "name"), name="hall_unique_in_site")]

    def __str__(self) -> str:
        return f"{self.site.slug}/{self.name}"


class GridIntensity(models.Model):
    """The grid's carbon intensity at a site in one UTC hour, where the site has a time
    series (imported: `manage.py import_grid_intensity`); the site's constant
    (`Site.grid_gco2_per_kwh`) covers the hours without one."""

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="grid_intensity")
    hour = models.BigIntegerField(help_text="the hour's start, epoch seconds (UTC)")
    gco2_per_kwh = models.FloatField(validators=[MinValueValidator(0)])

    class Meta:
        ordering = ("site", "hour")
        constraints = [
            models.UniqueConstraint(fields=("site", "hour"), name="grid_intensity_one_per_hour"),
            models.CheckConstraint(
                condition=models.Q(gco2_per_kwh__gte=0), name="grid_intensity_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.site.slug} {self.hour}: {self.gco2_per_kwh} g/kWh"
