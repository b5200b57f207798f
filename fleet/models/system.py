"""Fleetwatch's own state over time: the database's size, recorded once a minute by the task
`fleet.forecasts` (fleet/storage/database_size.py), the series its disk's time to limit is
fitted to (docs/forecast.md, "The database's disk")."""

from __future__ import annotations

from django.db import models


class DatabaseSize(models.Model):
    """The database's size at one minute, and how large it may grow: its size plus the free
    space of the filesystem it lives on, else the configured disk size, else unknown."""

    minute = models.BigIntegerField(unique=True, help_text="epoch seconds of the minute's start")
    size_bytes = models.BigIntegerField()
    limit_bytes = models.BigIntegerField(null=True)

    class Meta:
        ordering = ("minute",)
        verbose_name = "database size"

    def __str__(self) -> str:
        return f"{self.size_bytes} bytes at {self.minute}"
