"""Discrete events from agents: XIDs, ECC errors, a GPU lost, a collector failing."""

from __future__ import annotations

from django.db import models

__all__ = ("Event",)


class Event(models.Model):
    source = models.CharField(max_length=220)
    seq = models.BigIntegerField()
    pos = models.PositiveIntegerField(help_text="position in its batch")
    ts = models.FloatField(db_index=True)
    node = models.ForeignKey("fleet.Node", on_delete=models.CASCADE, null=True, blank=True)
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=20)
    code = models.BigIntegerField(null=True, blank=True)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ("-ts",)
        constraints = [
            # A batch resent after a lost ack stores its events once; ts is part of the
            # key because a re-imaged node starts its seq again from the beginning.
            models.UniqueConstraint(fields=("source", "seq", "pos", "ts"), name="event_once_ts")
        ]

    def __str__(self) -> str:
        return f"{self.source} {self.kind} {self.code or ''}"
