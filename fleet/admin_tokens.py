"""Tokens, refusals and agents' events in Django's admin: enrolment tokens issued here (the
secret shown once), source tokens read and revoked, what each source had refused, and the
events agents reported — records, viewable and not editable. Registered by fleet/admin.py."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from fleet.admin_base import ModelAdmin, RecordAdmin
from fleet.admin_display import epoch_text, pretty_json
from fleet.models import (
    EnrollmentToken,
    Event,
    RejectionTally,
    SourceToken,
    hash_token,
    new_secret,
)
from fleet.words import clock_offset_text


def _fingerprint(token_hash: str) -> str:
    # Enough of the hash to tell tokens apart; the rest stays out of screens and logs.
    return f"{token_hash[:8]}…" if token_hash else "—"


@admin.action(description="Revoke the selected tokens")
def revoke_tokens(
    modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Any]
) -> None:
    count = queryset.filter(revoked=False).update(revoked=True)
    modeladmin.message_user(request, f"{count} token{'s' * (count != 1)} revoked", messages.SUCCESS)


@admin.register(RejectionTally)
class RejectionTallyAdmin(RecordAdmin):
    """What each source had refused (counted by server processes, fleet/ingest/tally.py):
    a misconfigured agent shows as one source with one reason, an attack as many."""

    list_display = (
        "shown_source",
        "transport",
        "status",
        "field",
        "count",
        "last_reason",
        "last_client",
        "last_at",
    )
    list_filter = ("transport", "status")
    search_fields = ("source", "field", "last_reason", "last_client")
    readonly_fields = tuple(f.name for f in RejectionTally._meta.fields)

    @admin.display(description="Source (as claimed)", ordering="source")
    def shown_source(self, tally: RejectionTally) -> str:
        return tally.source or "unknown"


# Tokens and events ------------------------------------------------------------------------


@admin.register(EnrollmentToken)
class EnrollmentTokenAdmin(ModelAdmin):
    list_display = ("__str__", "site", "label", "fingerprint", "created", "expires", "usable")
    list_filter = ("site", "revoked")
    search_fields = ("label", "site__slug")
    list_select_related = ("site",)
    readonly_fields = ("fingerprint", "created")
    actions = (revoke_tokens,)

    @admin.display(description="hash")
    def fingerprint(self, token: EnrollmentToken) -> str:
        return _fingerprint(token.token_hash)

    @admin.display(description="usable", boolean=True)
    def usable(self, token: EnrollmentToken) -> bool:
        return token.usable()

    def save_model(
        self, request: HttpRequest, obj: EnrollmentToken, form: Any, change: bool
    ) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        # Only the hash is stored, so this message is the one time the secret can be read.
        plain = new_secret("fwe")
        obj.token_hash = hash_token(plain)
        super().save_model(request, obj, form, change)
        messages.success(
            request,
            f"Enrolment token for {obj.site.slug}: {plain} — copy it now; it will not be shown "
            "again.",
        )


@admin.register(SourceToken)
class SourceTokenAdmin(ModelAdmin):
    """Issued by enrolment, never here; the admin can only read them and revoke them."""

    list_display = (
        "source",
        "kind",
        "site",
        "status",
        "last_seq",
        "last_heard",
        "clock_offset",
        "fingerprint",
    )
    list_filter = ("kind", "site", "revoked")
    search_fields = ("source",)
    list_select_related = ("site",)
    fields = (
        "source",
        "kind",
        "site",
        "fingerprint",
        "created",
        "revoked",
        "last_seq",
        "last_heard",
        "clock_offset",
        "stats",
    )
    readonly_fields = (
        "source",
        "kind",
        "site",
        "fingerprint",
        "created",
        "last_seq",
        "last_heard",
        "clock_offset",
        "stats",
    )
    actions = (revoke_tokens,)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="hash")
    def fingerprint(self, token: SourceToken) -> str:
        return _fingerprint(token.token_hash)

    @admin.display(description="Status", ordering="revoked")
    def status(self, token: SourceToken) -> str:
        # A word, not Django's boolean icons: a "revoked" column drew a red cross on every
        # healthy token.
        return "revoked" if token.revoked else "in use"

    @admin.display(description="last heard", ordering="last_seen")
    def last_heard(self, token: SourceToken) -> str:
        return epoch_text(token.last_seen)

    @admin.display(description="clock offset")
    def clock_offset(self, token: SourceToken) -> str:
        return clock_offset_text(token.agent_stats)

    @admin.display(description="agent stats")
    def stats(self, token: SourceToken) -> str:
        return pretty_json(token.agent_stats)


@admin.register(Event)
class EventAdmin(RecordAdmin):
    """Agents' events are a record: viewable, not editable."""

    list_display = ("when", "source", "node", "gpu_index", "kind", "code")
    list_filter = ("kind",)
    search_fields = ("source", "detail", "node__name")
    list_select_related = ("node",)

    @admin.display(description="time", ordering="ts")
    def when(self, event: Event) -> str:
        return epoch_text(event.ts)
