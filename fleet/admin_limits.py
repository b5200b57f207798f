"""The GPU admin's view of limits: each in force with its origin, and the GPUs whose entered
and reported limits differ (fleet/health/limits.py owns the rule)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Coalesce
from django.http import HttpRequest

from fleet.health.levels import GpuLimits
from fleet.health.limits import (
    LIMIT_LABELS,
    STORED_LIMITS,
    differences,
    limit_in_force,
    reported_column,
)
from fleet.models import GPU


def limit_with_origin(gpu: GPU, name: str) -> str:
    """The limit in force, without its unit (the column header carries it), and its origin."""
    limit = limit_in_force(getattr(gpu, name), getattr(gpu, reported_column(name)))
    if limit.value is None or limit.origin is None:
        return "—"
    return f"{limit.value:g} ({limit.origin.value})"


def in_force_ordering(name: str) -> Coalesce:
    """Orders a column by the limit in force, as `limit_in_force` picks it."""
    return Coalesce(name, reported_column(name))


def differences_text(gpu: GPU) -> str:
    """ "slowdown 85 °C entered, 87 °C reported; …", or "—"."""
    found = differences(gpu.entered_limits(), gpu.reported_limits())
    parts = []
    for d in found:
        label, unit = LIMIT_LABELS[d.name]
        parts.append(f"{label} {d.entered:g} {unit} entered, {d.reported:g} {unit} reported")
    return "; ".join(parts) or "—"


def _differ() -> Q:
    """A GPU with some limit both entered and reported, at different values."""
    out = Q()
    for name in STORED_LIMITS:
        reported = reported_column(name)
        out |= Q(**{f"{name}__isnull": False, f"{reported}__isnull": False}) & ~Q(
            **{name: F(reported)}
        )
    return out


class LimitsDiffer(admin.SimpleListFilter):
    title = "limits"
    parameter_name = "limits"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("differ", "Entered differ from the agent's")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[GPU]) -> QuerySet[GPU]:
        if self.value() == "differ":
            return queryset.filter(_differ())
        return queryset


def reported_limits_text(gpu: GPU) -> str:
    """Every limit the agent reported, for the GPU's change page (read-only there)."""
    reported: GpuLimits = gpu.reported_limits()
    parts = []
    for name in STORED_LIMITS:
        value = getattr(reported, name)
        if value is not None:
            label, unit = LIMIT_LABELS[name]
            parts.append(f"{label} {value:g} {unit}")
    return "; ".join(parts) or "none reported"
