"""Prometheus servers Fleetwatch pulls dcgm-exporter series from (fleet/ingest/prometheus/pull.py),
the GPUs each one fed, and the series that matched no GPU."""

from __future__ import annotations

from django.db import models

from fleet.models.nodes import GPU
from fleet.models.sites import Site
from fleet.secrets import EncryptedCharField

__all__ = ("PrometheusSource", "PulledGPU", "UnmatchedSeries")


class PullStatus(models.TextChoices):
    NEVER = "never", "not pulled yet"
    OK = "ok", "ok"
    DOWN = "down", "down"


class PrometheusSource(models.Model):
    """A Prometheus that already scrapes dcgm-exporter on some of a site's nodes."""

    name = models.SlugField(max_length=60, unique=True)
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="prometheus_sources")
    url = models.URLField(help_text="base URL, e.g. http://prometheus.example.com:9090")
    # Secrets: stored encrypted (fleet/secrets.py), never shown back by the admin.
    bearer_token = EncryptedCharField(max_length=500, blank=True, help_text="sent as Bearer")
    basic_user = models.CharField(max_length=200, blank=True)
    basic_password = EncryptedCharField(max_length=500, blank=True)
    verify_tls = models.BooleanField(default=True)
    selector = models.CharField(
        max_length=300,
        blank=True,
        help_text='extra label matchers for every query, e.g. job="dcgm-exporter"',
    )
    host_labels = models.CharField(
        max_length=200,
        default="Hostname,hostname",
        help_text="labels naming the node, tried in order (after UUID)",
    )
    instance_map = models.JSONField(
        default=dict,
        blank=True,
        help_text='{"10.0.3.17:9400": "gpu-a01-03"}: instance (or its host part) → node name',
    )
    lookback_s = models.PositiveIntegerField(
        default=60, help_text="the oldest sample a pull reads (above the exporter's interval)"
    )
    enabled = models.BooleanField(default=True)
    # Written by the pull (fleet/ingest/prometheus/pull.py), read-only in the admin.
    last_pull_at = models.FloatField(null=True, blank=True, editable=False)
    last_status = models.CharField(
        max_length=8, choices=PullStatus.choices, default=PullStatus.NEVER, editable=False
    )
    last_error = models.TextField(blank=True, editable=False)
    last_ok_at = models.FloatField(null=True, blank=True, editable=False)
    last_sample_ts = models.FloatField(
        null=True, blank=True, editable=False, help_text="newest sample stored"
    )
    watermarks = models.JSONField(
        default=dict, blank=True, editable=False, help_text="per scrape target: newest sample"
    )
    last_summary = models.JSONField(default=dict, blank=True, editable=False)
    # The interval it is pulled at (PROMETHEUS_PULL_S when last pulled): what its GPUs'
    # data is judged stale by (fleet.health.cadence), like an agent's batch interval.
    pull_interval_s = models.FloatField(
        null=True, blank=True, editable=False, help_text="seconds between pulls"
    )

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name

    @property
    def origin(self) -> str:
        """How events and the pulled-GPU records name this source."""
        return f"prometheus:{self.name}"


class PulledGPU(models.Model):
    """A GPU whose figures came from a Prometheus source, and its last XID seen there."""

    source = models.ForeignKey(PrometheusSource, on_delete=models.CASCADE, related_name="gpus")
    gpu = models.ForeignKey(GPU, on_delete=models.CASCADE, related_name="pulled_from")
    first_pulled = models.FloatField()
    last_pulled = models.FloatField()
    last_xid = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ("source", "gpu")
        verbose_name = "pulled GPU"
        constraints = [models.UniqueConstraint(fields=("source", "gpu"), name="pulled_gpu_once")]

    def __str__(self) -> str:
        return f"{self.source.name}: {self.gpu}"


class UnmatchedSeries(models.Model):
    """dcgm-exporter series that named no GPU of the source's site: one row per GPU
    identity (UUID, host, index), so a pod moving on and off it does not add rows."""

    source = models.ForeignKey(PrometheusSource, on_delete=models.CASCADE, related_name="unmatched")
    identity = models.CharField(max_length=300)
    reason = models.CharField(max_length=300)
    labels = models.JSONField(default=dict)
    metrics = models.PositiveIntegerField(default=0, help_text="series at the last pull")
    first_seen = models.FloatField()
    last_seen = models.FloatField()

    class Meta:
        ordering = ("-last_seen",)
        verbose_name_plural = "unmatched series"
        constraints = [
            models.UniqueConstraint(fields=("source", "identity"), name="unmatched_once")
        ]

    def __str__(self) -> str:
        return f"{self.source.name}: {self.identity}"
