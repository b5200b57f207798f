"""Prometheus sources in the admin: configure one, see its last pull, the GPUs it feeds
and the series it could not place. Secrets (bearer token, basic-auth password) are
stored encrypted and write-only: the form never shows them back, and leaving the field
empty keeps the one stored (fleet/admin_secrets.py)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from fleet.admin_base import ModelAdmin, RecordAdmin
from fleet.admin_display import epoch_text, pretty_json
from fleet.admin_secrets import SecretsForm
from fleet.models import PrometheusSource, PulledGPU, UnmatchedSeries


class PrometheusSourceForm(SecretsForm):
    # A Prometheus typed without a scheme is usually plain HTTP inside the datacentre.
    url = forms.URLField(
        assume_scheme="http", help_text="base URL, e.g. http://prometheus.example.com:9090"
    )
    clear_secrets = forms.BooleanField(required=False, label="Clear the stored token and password")
    secret_fields = ("bearer_token", "basic_password")

    class Meta:
        model = PrometheusSource
        fields = (
            "name",
            "site",
            "url",
            "enabled",
            "selector",
            "lookback_s",
            "bearer_token",
            "basic_user",
            "basic_password",
            "verify_tls",
            "host_labels",
            "instance_map",
        )

    def clears(self, name: str, data: dict[str, Any]) -> bool:
        return bool(data.get("clear_secrets"))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("clear_secrets"):
            for name in self.secret_fields:
                data[name] = ""
        return data


@admin.register(PulledGPU)
class PulledGPUAdmin(RecordAdmin):
    """Which GPUs' figures come from which Prometheus source (written by the pull)."""

    list_display = ("gpu", "source", "first", "last", "last_xid")
    list_filter = ("source",)
    search_fields = ("gpu__node__name", "gpu__uuid")
    list_select_related = ("gpu__node", "source")
    fields = list_display
    readonly_fields = fields

    @admin.display(description="first pulled", ordering="first_pulled")
    def first(self, row: PulledGPU) -> str:
        return epoch_text(row.first_pulled)

    @admin.display(description="last pulled (to the minute)", ordering="last_pulled")
    def last(self, row: PulledGPU) -> str:
        return epoch_text(row.last_pulled)


@admin.register(PrometheusSource)
class PrometheusSourceAdmin(ModelAdmin):
    form = PrometheusSourceForm
    list_display = ("name", "site", "url", "enabled", "status", "last_pull", "gpus", "unmatched")
    list_filter = ("enabled", "site", "last_status")
    search_fields = ("name", "url")
    list_select_related = ("site",)
    readonly_fields = ("status", "last_pull", "last_ok", "newest_sample", "summary")
    fieldsets = (
        (None, {"fields": ("name", "site", "url", "enabled", "selector", "lookback_s")}),
        (
            "Authentication",
            {"fields": ("bearer_token", "basic_user", "basic_password", "clear_secrets")},
        ),
        ("TLS", {"fields": ("verify_tls",)}),
        ("Matching series to GPUs (UUID first)", {"fields": ("host_labels", "instance_map")}),
        ("Last pull", {"fields": readonly_fields}),
    )

    @admin.display(description="status", ordering="last_status")
    def status(self, source: PrometheusSource) -> str:
        if source.last_status == "down":
            return format_html("down: {}", source.last_error)
        return source.get_last_status_display()

    @admin.display(description="last pull", ordering="last_pull_at")
    def last_pull(self, source: PrometheusSource) -> str:
        return epoch_text(source.last_pull_at)

    @admin.display(description="last good pull")
    def last_ok(self, source: PrometheusSource) -> str:
        return epoch_text(source.last_ok_at)

    @admin.display(description="newest sample stored")
    def newest_sample(self, source: PrometheusSource) -> str:
        return epoch_text(source.last_sample_ts)

    @admin.display(description="what the last pull did")
    def summary(self, source: PrometheusSource) -> str:
        return pretty_json(source.last_summary)

    @admin.display(description="GPUs fed")
    def gpus(self, source: PrometheusSource) -> str:
        url = reverse("admin:fleet_pulledgpu_changelist") + f"?source__id__exact={source.pk}"
        return format_html('<a href="{}">{}</a>', url, source.gpus.count())

    @admin.display(description="unmatched")
    def unmatched(self, source: PrometheusSource) -> str:
        url = reverse("admin:fleet_unmatchedseries_changelist") + f"?source__id__exact={source.pk}"
        return format_html('<a href="{}">{}</a>', url, source.unmatched.count())


@admin.register(UnmatchedSeries)
class UnmatchedSeriesAdmin(RecordAdmin):
    """Series a pull could not place on a GPU of its site: add the node (or its GPU, or an
    `instance` mapping on the source) and the next pull stores them."""

    list_display = ("identity", "source", "reason", "metrics", "seen_first", "seen_last")
    list_filter = ("source",)
    search_fields = ("identity", "reason")
    list_select_related = ("source",)
    fields = ("source", "identity", "reason", "metrics", "seen_first", "seen_last", "label_set")
    readonly_fields = fields

    @admin.display(description="first seen", ordering="first_seen")
    def seen_first(self, row: UnmatchedSeries) -> str:
        return epoch_text(row.first_seen)

    @admin.display(description="last seen", ordering="last_seen")
    def seen_last(self, row: UnmatchedSeries) -> str:
        return epoch_text(row.last_seen)

    @admin.display(description="labels")
    def label_set(self, row: UnmatchedSeries) -> str:
        return pretty_json(row.labels)
