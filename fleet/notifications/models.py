"""Routes (where alerts go) and the delivery log (what was sent, and every try)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.crypto import salted_hmac

from fleet.notifications.notice import SEVERITIES
from fleet.notifications.slack import redact_url
from fleet.secrets import SETTING, EncryptedURLField, SecretError

__all__ = ("Delivery", "DeliveryAttempt", "Route", "webhook_fingerprint")

SEVERITY_CHOICES = [(s, s.capitalize()) for s in SEVERITIES]


def webhook_fingerprint(url: str) -> str:
    """A hash of a webhook URL keyed by SECRET_KEY: tells two URLs apart, gives neither away."""
    return salted_hmac("fleet.notifications.webhook", url, algorithm="sha256").hexdigest()


class Route(models.Model):
    """A Slack channel, reached through its incoming webhook, and which alerts go there."""

    OK = "ok"
    FAILING = "failing"
    STATE_CHOICES = [(OK, "Working"), (FAILING, "Failing")]

    name = models.CharField(verbose_name="name", max_length=100, unique=True)
    # A secret (anyone holding it can post): stored encrypted (fleet/secrets.py), shown
    # shortened. Empty for the SLACK_WEBHOOK_URL route, whose URL stays in the environment.
    webhook_url = EncryptedURLField(
        verbose_name="Slack webhook URL",
        max_length=500,
        help_text="A secret (anyone holding it can post): stored encrypted, shown shortened.",
    )
    site = models.ForeignKey(
        "fleet.Site",
        verbose_name="site",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        help_text="Only this site's alerts; empty: every site.",
    )
    owner = models.CharField(
        verbose_name="owner",
        max_length=253,
        blank=True,
        help_text="Only alerts about GPUs this Kubernetes namespace or Slurm account holds"
        " (a team's channel); empty: every owner's, and alerts about no allocation.",
    )
    min_severity = models.CharField(
        verbose_name="minimum severity",
        max_length=10,
        choices=SEVERITY_CHOICES,
        default="warning",
    )
    enabled = models.BooleanField(verbose_name="enabled", default=True)
    from_environment = models.BooleanField(
        verbose_name="set by SLACK_WEBHOOK_URL",
        default=False,
        editable=False,
        help_text="Used when no other route matches; follows SLACK_WEBHOOK_URL.",
    )
    # The SLACK_WEBHOOK_URL route: a keyed hash of the URL (not the URL), to notice it changed.
    environment_fingerprint = models.CharField(
        verbose_name="fingerprint of SLACK_WEBHOOK_URL", max_length=64, blank=True, editable=False
    )
    state = models.CharField(
        verbose_name="state", max_length=10, choices=STATE_CHOICES, default=OK, editable=False
    )
    failing_reason = models.CharField(
        verbose_name="why it is failing", max_length=300, blank=True, editable=False
    )
    state_since = models.DateTimeField(
        verbose_name="in this state since", default=timezone.now, editable=False
    )
    # The per-webhook rate limit, shared by every worker: a sender claims the next slot
    # with a conditional UPDATE (fleet.notifications.delivery.claim_send_slot).
    next_send_at = models.DateTimeField(
        verbose_name="next message allowed at", default=timezone.now, editable=False
    )

    class Meta:
        verbose_name = "Slack route"
        verbose_name_plural = "Slack routes"
        ordering = ("name",)
        constraints = [
            models.UniqueConstraint(
                fields=("from_environment",),
                condition=Q(from_environment=True),
                name="notifications_route_one_from_environment",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def post_url(self) -> str:
        """Where messages go: SLACK_WEBHOOK_URL itself for its route, else the stored URL
        (decrypted; raises fleet.secrets.SecretError when the key is missing)."""
        if self.from_environment:
            return str(settings.SLACK_WEBHOOK_URL)
        return str(self.webhook_url)

    def webhook_shown(self) -> str:
        """The webhook as people see it: shortened, or why it cannot be read."""
        try:
            return redact_url(self.post_url)
        except SecretError:
            return f"unreadable: no key for it in {SETTING}"


class Delivery(models.Model):
    """One message to one route, written before the first try and kept afterwards."""

    PENDING = "pending"
    SENDING = "sending"
    DELIVERED = "delivered"
    FAILED = "failed"
    STATE_CHOICES = [
        (PENDING, "Waiting to send"),
        (SENDING, "Sending"),
        (DELIVERED, "Delivered"),
        (FAILED, "Failed"),
    ]
    KIND_CHOICES = [
        ("firing", "Alert firing"),
        ("update", "Alert update"),
        ("repeat", "Still firing"),
        ("resolved", "Alert resolved"),
        ("recovered", "Cause recovered"),
        ("report", "Weekly report"),
        ("test", "Test message"),
    ]

    route = models.ForeignKey(
        Route,
        verbose_name="route",
        on_delete=models.SET_NULL,  # the log outlives a deleted route
        null=True,
        related_name="deliveries",
    )
    kind = models.CharField(verbose_name="kind", max_length=10, choices=KIND_CHOICES)
    # Messages of one thread (an alert group's firing, updates, resolved) go to a route in
    # the order they were written: a later one waits while an earlier one is unsent.
    thread = models.CharField(verbose_name="thread", max_length=64, blank=True)
    severity = models.CharField(verbose_name="severity", max_length=10, choices=SEVERITY_CHOICES)
    title = models.CharField(verbose_name="what", max_length=300)
    message = models.JSONField(verbose_name="Slack message")
    state = models.CharField(
        verbose_name="state", max_length=10, choices=STATE_CHOICES, default=PENDING
    )
    created_at = models.DateTimeField(verbose_name="queued at", auto_now_add=True)
    due_at = models.DateTimeField(verbose_name="next try at", default=timezone.now)
    # While SENDING: past this, the sender is presumed dead and the row may be claimed again.
    lease_until = models.DateTimeField(verbose_name="claimed until", null=True, blank=True)
    attempts = models.PositiveIntegerField(verbose_name="tries", default=0)
    transient_failures = models.PositiveIntegerField(
        verbose_name="tries that failed on Slack's side", default=0
    )
    delivered_at = models.DateTimeField(verbose_name="delivered at", null=True, blank=True)
    last_error = models.CharField(verbose_name="last error", max_length=300, blank=True)

    class Meta:
        verbose_name = "Slack delivery"
        verbose_name_plural = "Slack deliveries"
        ordering = ("-created_at",)
        indexes = [models.Index(fields=("state", "due_at"), name="notif_delivery_state_due")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.title}"


class DeliveryAttempt(models.Model):
    """One POST to Slack and its answer."""

    delivery = models.ForeignKey(
        Delivery, verbose_name="delivery", on_delete=models.CASCADE, related_name="tries"
    )
    started_at = models.DateTimeField(verbose_name="sent at")
    http_status = models.PositiveSmallIntegerField(
        verbose_name="HTTP status", null=True, blank=True, help_text="Empty: no answer."
    )
    error = models.CharField(verbose_name="Slack's answer", max_length=300, blank=True)
    duration_ms = models.PositiveIntegerField(verbose_name="took (ms)")
    outcome = models.CharField(verbose_name="what happened next", max_length=20)

    class Meta:
        verbose_name = "try"
        verbose_name_plural = "tries"
        ordering = ("started_at",)

    def __str__(self) -> str:
        return f"{self.started_at:%H:%M:%S} {self.http_status or '-'} {self.error}"
