"""Enrolment and source tokens, and what the backend knows of each agent."""

from __future__ import annotations

import hashlib
import secrets

from django.db import models
from django.utils import timezone

from fleet.choices import SourceKindChoices
from fleet.models.sites import Site

__all__ = ("EnrollmentToken", "SourceToken", "hash_token", "new_secret")


def new_secret(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def hash_token(token: str) -> str:
    # Tokens are 256-bit random secrets, so a plain SHA-256 cannot be brute-forced
    # and lets ingest look a token up by its hash in one indexed query.
    return hashlib.sha256(token.encode()).hexdigest()


class EnrollmentToken(models.Model):
    """A site-wide secret that lets an agent obtain its own source token."""

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="enrollment_tokens")
    label = models.CharField(max_length=100, blank=True)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created = models.DateTimeField(default=timezone.now, editable=False)
    expires = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.site.slug}: {self.label or self.token_hash[:8]}"

    @classmethod
    def issue(
        cls, site: Site, label: str = "", plain: str | None = None
    ) -> tuple[EnrollmentToken, str]:
        plain = plain or new_secret("fwe")
        return cls.objects.create(site=site, label=label, token_hash=hash_token(plain)), plain

    def usable(self) -> bool:
        return not self.revoked and (self.expires is None or self.expires > timezone.now())


class SourceToken(models.Model):
    """The token of one source (`node:…`, `rack:…`, `loop:…`, `site:…`); stored hashed."""

    source = models.CharField(max_length=220, unique=True)
    kind = models.CharField(max_length=8, choices=SourceKindChoices.choices)
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="source_tokens")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created = models.DateTimeField(default=timezone.now, editable=False)
    revoked = models.BooleanField(default=False)
    # What the backend last heard from this source (saved by the ingest child).
    last_seq = models.BigIntegerField(null=True, blank=True, editable=False)
    last_seen = models.FloatField(null=True, blank=True, editable=False)
    agent_stats = models.JSONField(default=dict, blank=True, editable=False)
    # The cadence the source last declared (protocol `cadence`; NULL: an agent older than
    # the field, judged by fleet.health.cadence's default for its kind).
    sample_interval_s = models.FloatField(
        null=True, blank=True, editable=False, help_text="seconds between samples, as declared"
    )
    batch_interval_s = models.FloatField(
        null=True, blank=True, editable=False, help_text="seconds between batches, as declared"
    )
    field_intervals_s = models.JSONField(
        default=dict,
        blank=True,
        editable=False,
        help_text="fields refreshed less often than every sample: metric → seconds, as declared",
    )

    class Meta:
        ordering = ("source",)

    def __str__(self) -> str:
        return self.source
