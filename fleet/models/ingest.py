"""What each ingest writer (a child process of a server, fleet/ingest/child.py) has done,
saved by the writer itself every few seconds and at exit, so /metrics can export ingest
counters from the database whichever server process answers it. One row per writer start:
the sum over rows is a counter across restarts, and the row count is the starts."""

from __future__ import annotations

from django.db import models


class IngestWriter(models.Model):
    writer = models.CharField(max_length=120, unique=True, help_text="host:pid:start time")
    started_at = models.FloatField()
    updated_at = models.FloatField()
    batches = models.BigIntegerField(default=0, help_text="stored and acknowledged")
    samples = models.BigIntegerField(default=0)
    refused = models.BigIntegerField(default=0, help_text="answered 400 by the writer")
    retried = models.BigIntegerField(default=0, help_text="answered 503: not stored, resent")
    too_old = models.BigIntegerField(
        default=0, help_text="samples older than raw retention: acked, not stored"
    )
    saves = models.BigIntegerField(default=0, help_text="latest-state saves")
    save_failures = models.BigIntegerField(default=0)

    class Meta:
        ordering = ("-started_at",)
        verbose_name = "ingest writer"

    def __str__(self) -> str:
        return self.writer
