"""Admin: Slack routes (with a test button and their failing state) and the delivery
log with every try, read-only. Webhook URLs are secrets: lists show them shortened."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from fleet.notifications.models import Delivery, DeliveryAttempt, Route
from fleet.notifications.slack import redact_url
from fleet.notifications.tasks import send_test

if TYPE_CHECKING:
    # django-stubs makes these generic; at run time they are not subscriptable.
    RouteModelAdmin = admin.ModelAdmin[Route]
    DeliveryModelAdmin = admin.ModelAdmin[Delivery]
    AttemptInline = admin.TabularInline[DeliveryAttempt, Delivery]
else:
    RouteModelAdmin = DeliveryModelAdmin = admin.ModelAdmin
    AttemptInline = admin.TabularInline


@admin.register(Route)
class RouteAdmin(RouteModelAdmin):
    list_display = (
        "name",
        "webhook",
        "site",
        "min_severity",
        "enabled",
        "state_shown",
        "state_since",
    )
    list_filter = ("state", "enabled", "site")
    readonly_fields = ("from_environment", "state", "failing_reason", "state_since")
    actions = ("send_test_message",)

    @admin.display(description="webhook")
    def webhook(self, route: Route) -> str:
        return redact_url(route.webhook_url)

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


class DeliveryAttemptInline(AttemptInline):
    model = DeliveryAttempt
    fields = ("started_at", "http_status", "error", "duration_ms", "outcome")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Delivery | None = None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(DeliveryModelAdmin):
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Delivery | None = None) -> bool:
        return False
