"""Alert rules in the admin: edit and validate; the signal catalogue shown beside them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db import models
from django.utils.html import format_html, format_html_join

from fleet.alerts import signals
from fleet.alerts.choices import SEVERITY_COLORS
from fleet.alerts.models import AlertInstance, AlertInstanceEvent, AlertRule

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[Any]
else:
    ModelAdmin = admin.ModelAdmin


@admin.register(AlertRule)
class AlertRuleAdmin(ModelAdmin):
    list_display = (
        "key",
        "name",
        "scope",
        "signal",
        "condition",
        "for_duration",
        "severity_badge",
        "enabled",
        "builtin",
    )
    list_filter = ("scope", "severity", "enabled", "builtin")
    # Runbooks live on https; say so rather than rely on Django 5's http default.
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_editable = ("enabled",)
    search_fields = ("key", "name", "signal", "summary")
    readonly_fields = ("builtin", "signal_details", "signal_catalogue", "updated")
    fieldsets = (
        (None, {"fields": ("key", "name", "description", "enabled", "builtin")}),
        (
            "Condition",
            {
                "fields": (
                    "scope",
                    "signal",
                    "signal_details",
                    "params",
                    "comparison",
                    "threshold",
                    "clear_threshold",
                    "for_duration",
                )
            },
        ),
        ("Notification", {"fields": ("severity", "labels", "summary", "runbook_url")}),
        ("Signal catalogue", {"classes": ("collapse",), "fields": ("signal_catalogue",)}),
        (None, {"fields": ("updated",)}),
    )

    @admin.display(description="condition")
    def condition(self, rule: AlertRule) -> str:
        text = f"{rule.get_comparison_display()} {rule.threshold:g}"
        if rule.clear_threshold is not None:
            text += f", clears past {rule.clear_threshold:g}"
        return text

    @admin.display(description="severity", ordering="severity")
    def severity_badge(self, rule: AlertRule) -> str:
        color = SEVERITY_COLORS.get(rule.severity, "gray")
        return format_html('<b style="color:{}">{}</b>', color, rule.get_severity_display())

    @admin.display(description="signal")
    def signal_details(self, rule: AlertRule) -> str:
        spec = rule.signal_spec
        if spec is None:
            return "—"
        unit = f" ({spec.unit})" if spec.unit else ""
        return format_html(
            "{}{} — computed from <code>{}</code>", spec.description, unit, spec.source
        )

    @admin.display(description="signals by scope")
    def signal_catalogue(self, rule: AlertRule) -> str:
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            ((s.scope, s.name, s.unit, s.description) for s in signals.SIGNALS),
        )
        return format_html(
            "<table><tr><th>scope</th><th>signal</th><th>unit</th><th>what</th></tr>{}</table>",
            rows,
        )


class AlertInstanceEventInline(admin.TabularInline):  # type: ignore[type-arg]
    model = AlertInstanceEvent
    extra = 0
    can_delete = False
    fields = ("at", "from_state", "to_state", "value", "no_data")
    readonly_fields = fields

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(AlertInstance)
class AlertInstanceAdmin(ModelAdmin):
    """Read-only: the engine writes instances and their history."""

    list_display = (
        "rule",
        "entity",
        "state",
        "no_data",
        "value",
        "started_at",
        "fired_at",
        "resolved_at",
    )
    list_filter = ("state", "no_data", "scope", "rule")
    search_fields = ("entity", "rule__key", "rule__name")
    inlines = (AlertInstanceEventInline,)

    def get_readonly_fields(self, request: Any, obj: Any = None) -> list[str]:
        return [f.name for f in AlertInstance._meta.fields]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
