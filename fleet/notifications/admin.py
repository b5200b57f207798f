"""Admin: Slack routes (with a test button and their failing state) and the delivery
log with every try, read-only. Webhook URLs are secrets, stored encrypted: lists show
them shortened, the form never shows one back (a new one replaces it)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from fleet.admin_base import ModelAdmin, RecordAdmin, TabularInline
from fleet.admin_secrets import SecretsForm
from fleet.notifications.models import Delivery, DeliveryAttempt, Route
from fleet.notifications.tasks import send_test


class RouteForm(SecretsForm):
    webhook_url = forms.URLField(label="Slack webhook URL", max_length=500, assume_scheme="https")
    secret_fields = ("webhook_url",)

    class Meta:
        model = Route
        fields = ("name", "webhook_url", "site", "owner", "min_severity", "enabled")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.from_environment:
            # Its URL is SLACK_WEBHOOK_URL, not stored: shown (read-only), not edited here.
            del self.fields["webhook_url"]

    def describe_stored(self, name: str) -> str:
        return f"{self.instance.webhook_shown()} (stored encrypted)"


@admin.register(Route)
class RouteAdmin(ModelAdmin):
    form = RouteForm
    list_display = (
        "name",
        "webhook",
        "site",
        "owner",
        "min_severity",
        "enabled",
        "state_shown",
        "state_since",
    )
    list_filter = ("state", "enabled", "site")
    readonly_fields = ("from_environment", "state", "failing_reason", "state_since")
    actions = ("send_test_message",)

    def get_fields(self, request: HttpRequest, obj: Route | None = None) -> Any:
        fields = super().get_fields(request, obj)
        if obj is not None and obj.from_environment:
            return [f for f in fields if f != "webhook_url"]
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: Route | None = None) -> list[str]:
        extra = ["webhook"] if obj is not None and obj.from_environment else []
        return [*self.readonly_fields, *extra]

    @admin.display(description="webhook")
    def webhook(self, route: Route) -> str:
        return route.webhook_shown()

    @admin.display(description="state", ordering="state")
    def state_shown(self, route: Route) -> str:
        if route.state == Route.FAILING:
            return f"Failing: {route.failing_reason}"
        return "Working"

    @admin.action(description="Send a test message")
    def send_test_message(self, request: HttpRequest, queryset: QuerySet[Route]) -> None:
        for route in queryset:
            delivery = send_test(route)
            self.message_user(
                request,
                f"Test message to “{route.name}” queued (delivery {delivery.pk});"
                " its result shows under Slack deliveries.",
                messages.SUCCESS,
            )


class DeliveryAttemptInline(TabularInline):
    model = DeliveryAttempt
    fields = ("started_at", "http_status", "error", "duration_ms", "outcome")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Delivery | None = None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(RecordAdmin):
    list_display = (
        "created_at",
        "kind",
        "severity",
        "title",
        "route",
        "state",
        "attempts",
        "delivered_at",
        "last_error",
    )
    list_filter = ("state", "kind", "severity", "route")
    search_fields = ("title",)
    inlines = (DeliveryAttemptInline,)
    exclude = ("message",)  # the JSON is long; the title and tries say what happened
