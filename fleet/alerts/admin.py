"""Alert rules in the admin: edit and validate; the signal catalogue shown beside them."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from fleet.admin_base import ModelAdmin
from fleet.admin_display import epoch_text
from fleet.alerts import signals
from fleet.alerts.acks import acknowledge
from fleet.alerts.choices import SEVERITY_COLORS
from fleet.alerts.models import (
    AlertEvaluation,
    AlertGroup,
    AlertInstance,
    AlertInstanceEvent,
    AlertRule,
    MaintenanceWindow,
    Silence,
)
from fleet.alerts.muting import matchers_text


class EngineRecordAdmin(ModelAdmin):
    """Rows the alert engine writes: nobody adds or deletes one here."""

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


class EngineLogAdmin(EngineRecordAdmin):
    """An engine record shown whole and read-only: what happened, not for editing."""

    def get_readonly_fields(self, request: Any, obj: Any = None) -> list[str]:
        return [f.name for f in self.model._meta.fields]


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
        (
            "Notification",
            {"fields": ("severity", "labels", "summary", "runbook_url", "repeat_interval")},
        ),
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
class AlertInstanceAdmin(EngineRecordAdmin):
    """Written by the engine; people only acknowledge (the action, or a comment on the
    change page: saving one records who and when)."""

    list_display = (
        "rule",
        "entity",
        "place",
        "state",
        "no_data",
        "value",
        "started_at",
        "fired_at",
        "resolved_at",
        "acknowledged",
        "group",
    )
    list_filter = ("state", "no_data", "scope", "rule")
    search_fields = ("entity", "rule__key", "rule__name", "ack_comment")
    inlines = (AlertInstanceEventInline,)
    actions = ("acknowledge_selected",)
    fields = (
        "rule",
        "scope",
        "entity",
        "labels",
        "state",
        "value",
        "no_data",
        "started_at",
        "fired_at",
        "resolved_at",
        "group",
        "acknowledged_at",
        "acknowledged_by",
        "ack_comment",
    )

    def get_readonly_fields(self, request: Any, obj: Any = None) -> list[str]:
        editable = obj is not None and obj.acknowledged_at is None and obj.state != "resolved"
        return [f for f in self.fields if f != "ack_comment" or not editable]

    @admin.display(description="where")
    def place(self, inst: AlertInstance) -> str:
        labels = inst.labels or {}
        parts = [labels.get(k) for k in ("site", "loop", "rack", "node", "gpu", "feed")]
        return " / ".join(str(p) for p in parts if p)

    @admin.display(description="acknowledged")
    def acknowledged(self, inst: AlertInstance) -> str:
        if inst.acknowledged_at is None:
            return "—"
        return f"{inst.acknowledged_by}: {inst.ack_comment}"

    def save_model(self, request: Any, obj: AlertInstance, form: Any, change: bool) -> None:
        comment = (form.cleaned_data.get("ack_comment") or "").strip()
        if comment:
            acknowledge([obj.pk], request.user.get_username(), comment)

    @admin.action(description="Acknowledge the selected alerts (stops repeats)")
    def acknowledge_selected(self, request: HttpRequest, queryset: QuerySet[AlertInstance]) -> None:
        user = request.user.get_username()  # type: ignore[union-attr]
        done = acknowledge(queryset.values_list("pk", flat=True), user, f"acknowledged by {user}")
        self.message_user(request, f"{done} alert(s) acknowledged.", messages.SUCCESS)


@admin.register(AlertGroup)
class AlertGroupAdmin(EngineLogAdmin):
    """The notifications: what each group said, and when. Read-only."""

    list_display = ("title", "key", "opened_at", "closed_at", "messages", "last_sent_at")
    list_filter = (("closed_at", admin.EmptyFieldListFilter),)
    search_fields = ("key", "title")


class SilenceForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Silence
        fields = ("matchers", "starts_at", "ends_at", "comment")


@admin.register(Silence)
class SilenceAdmin(ModelAdmin):
    form = SilenceForm
    list_display = ("matcher_text", "starts_at", "ends_at", "active", "created_by", "comment")
    search_fields = ("comment", "created_by")
    actions = ("expire_now",)

    @admin.display(description="matchers")
    def matcher_text(self, silence: Silence) -> str:
        return matchers_text(silence.matchers)

    @admin.display(description="in force", boolean=True)
    def active(self, silence: Silence) -> bool:
        return silence.starts_at <= timezone.now() < silence.ends_at

    def save_model(self, request: Any, obj: Silence, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user.get_username()
        super().save_model(request, obj, form, change)

    @admin.action(description="End the selected silences now")
    def expire_now(self, request: HttpRequest, queryset: QuerySet[Silence]) -> None:
        now = timezone.now()
        done = queryset.filter(ends_at__gt=now).update(ends_at=now)
        self.message_user(request, f"{done} silence(s) ended.", messages.SUCCESS)


class MaintenanceForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = MaintenanceWindow
        fields = ("site", "rack", "node", "loop", "starts_at", "ends_at", "comment")


@admin.register(MaintenanceWindow)
class MaintenanceWindowAdmin(ModelAdmin):
    form = MaintenanceForm
    list_display = ("__str__", "starts_at", "ends_at", "created_by", "comment")
    autocomplete_fields = ()
    search_fields = ("comment", "created_by")

    def save_model(self, request: Any, obj: MaintenanceWindow, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user.get_username()
        super().save_model(request, obj, form, change)


@admin.register(AlertEvaluation)
class AlertEvaluationAdmin(EngineLogAdmin):
    """The engine's heartbeat: when it last ran, how long that took, what the watchdog said."""

    list_display = ("last_pass", "last_took", "watchdog_problem", "watchdog_seen")

    @admin.display(description="last pass")
    def last_pass(self, row: AlertEvaluation) -> str:
        return epoch_text(row.tick or None)  # 0.0: the engine has not run yet

    @admin.display(description="Last pass took (s)", ordering="last_duration_s")
    def last_took(self, row: AlertEvaluation) -> str:
        return f"{row.last_duration_s:.3f}"
