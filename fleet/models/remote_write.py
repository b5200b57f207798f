"""How far remote write (fleet/remote_write/) has shipped each sample kind's raw rows: one row
per kind, moved only after the receiver answered 2xx (or refused a request for good: 4xx)."""

from __future__ import annotations

from django.db import models


class RemoteWriteCursor(models.Model):
    """The shipper's place in one kind's raw table. Rows are shipped in (ts, entity) order;
    `ts` and `entity` name the last row shipped (null `ts`: none yet, start at
    `complete_until`), and every settled row before `complete_until` has been shipped or
    dropped. Lag is now minus `complete_until`."""

    kind = models.CharField(max_length=16, unique=True, help_text="sample kind: gpu, node, …")
    ts = models.FloatField(null=True, help_text="epoch s of the last row shipped")
    entity = models.JSONField(default=list, help_text="its entity key (ids)")
    complete_until = models.FloatField(help_text="every settled row before it is shipped")
    shipped_samples = models.BigIntegerField(default=0, help_text="accepted by the receiver (2xx)")
    dropped_samples = models.BigIntegerField(
        default=0, help_text="refused for good by the receiver (4xx other than 429), not resent"
    )
    last_success_at = models.FloatField(null=True, help_text="epoch s of the last 2xx")
    failures = models.PositiveIntegerField(default=0, help_text="passes failed in a row")
    retry_at = models.FloatField(null=True, help_text="no pass before this (backoff)")
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ("kind",)
        verbose_name = "remote write cursor"

    def __str__(self) -> str:
        return f"{self.kind} until {self.complete_until}"
