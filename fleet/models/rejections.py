"""How much input each source had refused, for the admin ("Refused input"): counted in
each server process and added here every few seconds (fleet/ingest/rejections.py), and by
the ingest writer for parts of acknowledged batches it did not store. Bounded by
fleet/ingest/tally.py: the rows seen longest ago are deleted past `MAX_ROWS`, their
refusals added to the row "(older rows dropped)"."""

from __future__ import annotations

from django.db import models


class RejectionTally(models.Model):
    source = models.CharField(max_length=240, blank=True, help_text="as the request claimed it")
    transport = models.CharField(max_length=20)
    status = models.PositiveSmallIntegerField()
    field = models.CharField(max_length=100)
    count = models.BigIntegerField(default=0)
    last_reason = models.CharField(max_length=300, blank=True)
    last_client = models.CharField(max_length=240, blank=True)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()

    class Meta:
        ordering = ("-last_at",)
        verbose_name = "refused input"
        verbose_name_plural = "refused input"
        constraints = [
            models.UniqueConstraint(
                fields=("source", "transport", "status", "field"), name="rejection_tally_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.source or 'unknown source'}: {self.status} {self.field} ×{self.count}"
