"""The inventory in Django's admin: edit sites down to GPUs (tokens, refusals and events:
fleet/admin_tokens.py).

Fields that agents or the ingest writer own (a source's last batch, a node's reported
info) are shown read-only; token hashes are never shown whole nor editable.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.forms import BaseInlineFormSet
from django.http import HttpRequest

from fleet import (
    admin_access,  # noqa: F401  (site roles; Fleetwatch's name on the admin)
    admin_tokens,  # noqa: F401  (tokens, refusals and agents' events)
    admin_workloads,  # noqa: F401  (who runs on each GPU, read-only)
)
from fleet.admin_base import (
    CountingAdmin,
    ModelAdmin,
    TabularInline,
    children_column,
)
from fleet.admin_display import pretty_json
from fleet.admin_limits import (
    LimitsDiffer,
    differences_text,
    in_force_ordering,
    limit_with_origin,
    reported_limits_text,
)
from fleet.agent_versions import node_agent_support
from fleet.choices import PowerFeedTypeChoices
from fleet.models import (
    GPU,
    CoolingLoop,
    FacilityMeter,
    Hall,
    Node,
    PowerFeed,
    Rack,
    Site,
    pue_category_for_roles,
)

# Helpers ----------------------------------------------------------------------------------


def _kw(value: float) -> str:
    return f"{value:.1f} kW"


def _number(value: float | None) -> str:
    # For a column whose header carries the unit; a figure never entered is not a zero.
    return "—" if value is None else f"{value:g}"


# Sites and halls --------------------------------------------------------------------------


class HallInline(TabularInline):
    model = Hall
    extra = 0
    show_change_link = True


class CoolingLoopInline(TabularInline):
    model = CoolingLoop
    extra = 0
    show_change_link = True


class FacilityMeterInline(TabularInline):
    model = FacilityMeter
    extra = 0


@admin.register(Site)
class SiteAdmin(CountingAdmin):
    list_display = ("slug", "name", "timezone", "hall_count", "pue_category")
    search_fields = ("slug", "name")
    inlines = (HallInline, CoolingLoopInline, FacilityMeterInline)
    counted = "halls"
    hall_count = children_column("halls")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Site]:
        return super().get_queryset(request).prefetch_related("meters")

    @admin.display(description="PUE category")
    def pue_category(self, site: Site) -> str:
        category = pue_category_for_roles({m.role for m in site.meters.all()})
        return "none (needs utility and IT meters)" if category is None else str(category)


class RackInline(TabularInline):
    model = Rack
    fields = ("name", "position", "cooling", "power_budget_kw", "loop")
    extra = 0
    show_change_link = True


@admin.register(Hall)
class HallAdmin(CountingAdmin):
    list_display = ("name", "site", "rack_count")
    list_filter = ("site",)
    search_fields = ("name", "site__slug", "site__name")
    list_select_related = ("site",)
    inlines = (RackInline,)
    counted = "racks"
    rack_count = children_column("racks")


# Racks and power --------------------------------------------------------------------------


FEED_FIELDS = ("name", "type", "phase", "voltage", "amperage", "max_utilization")


class PowerFeedFormSet(BaseInlineFormSet):  # type: ignore[type-arg]
    """Holds the rack's budget against the feeds as submitted, not as they were stored.

    Rack.clean() can only see saved feeds, so a new rack, or feeds edited alongside
    the budget, would otherwise escape the check.
    """

    def clean(self) -> None:
        super().clean()
        budget = self.instance.power_budget_kw
        # Forms with errors of their own already say so; judge the budget on the rest.
        kept = [
            f
            for f in self.forms
            if not f.errors and f.cleaned_data and not f.cleaned_data.get("DELETE")
        ]
        feeds = [PowerFeed(**{k: f.cleaned_data[k] for k in FEED_FIELDS}) for f in kept]
        primary = [f for f in feeds if f.type == PowerFeedTypeChoices.PRIMARY]
        capacity = sum(f.available_kw for f in primary)
        if budget and primary and budget > capacity:
            raise ValidationError(
                f"budget {budget:g} kW exceeds these primary feeds' {capacity:.1f} kW"
            )


class PowerFeedInline(TabularInline):
    model = PowerFeed
    formset = PowerFeedFormSet
    fields = (*FEED_FIELDS, "available")
    readonly_fields = ("available",)
    extra = 0

    @admin.display(description="Available")
    def available(self, feed: PowerFeed) -> str:
        return _kw(feed.available_kw) if feed.pk else "—"


class NodeInline(TabularInline):
    model = Node
    fields = ("name", "position", "model")
    extra = 0
    show_change_link = True


@admin.register(Rack)
class RackAdmin(CountingAdmin):
    list_display = (
        "name",
        "hall",
        "cooling",
        "loop",
        "budget",
        "feed_capacity",
        "node_count",
    )
    list_filter = ("hall__site", "hall", "cooling", "loop")
    search_fields = ("name", "hall__name", "hall__site__slug")
    list_select_related = ("hall__site", "loop__site")
    inlines = (PowerFeedInline, NodeInline)
    counted = "nodes"
    node_count = children_column("nodes")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Rack]:
        # Prefetched so each row's feed capacity costs no query of its own.
        return super().get_queryset(request).prefetch_related("feeds")

    @admin.display(description="Budget", ordering="power_budget_kw")
    def budget(self, rack: Rack) -> str:
        return _kw(rack.power_budget_kw)

    @admin.display(description="Primary feeds can carry")
    def feed_capacity(self, rack: Rack) -> str:
        return _kw(rack.feed_capacity_kw())


@admin.register(PowerFeed)
class PowerFeedAdmin(ModelAdmin):
    list_display = (
        "name",
        "rack",
        "type",
        "phase",
        "volts",
        "amps",
        "utilisation_cap",
        "available",
    )
    list_filter = ("type", "phase", "rack__hall__site")
    search_fields = ("name", "rack__name")
    list_select_related = ("rack__hall__site",)
    readonly_fields = ("available",)

    @admin.display(description="Available")
    def available(self, feed: PowerFeed) -> str:
        return _kw(feed.available_kw)

    @admin.display(description="Voltage (V)", ordering="voltage")
    def volts(self, feed: PowerFeed) -> int:
        return feed.voltage

    @admin.display(description="Breaker (A)", ordering="amperage")
    def amps(self, feed: PowerFeed) -> int:
        return feed.amperage

    @admin.display(description="Max utilisation (%)", ordering="max_utilization")
    def utilisation_cap(self, feed: PowerFeed) -> int:
        return feed.max_utilization


# Cooling and facility ---------------------------------------------------------------------


@admin.register(CoolingLoop)
class CoolingLoopAdmin(CountingAdmin):
    list_display = (
        "name",
        "site",
        "liquid_class",
        "supply_limit",
        "capacity",
        "rated_flow",
        "rack_count",
    )
    list_filter = ("site", "liquid_class")
    search_fields = ("name", "site__slug")
    list_select_related = ("site",)
    counted = "racks"
    rack_count = children_column("racks")

    @admin.display(description="Supply limit")
    def supply_limit(self, loop: CoolingLoop) -> str:
        limit = loop.effective_supply_limit_c()
        return "—" if limit is None else f"{limit:g} °C"

    @admin.display(description="Capacity (kW)", ordering="capacity_kw")
    def capacity(self, loop: CoolingLoop) -> str:
        return _number(loop.capacity_kw)

    @admin.display(description="Rated flow (L/min)", ordering="rated_flow_lpm")
    def rated_flow(self, loop: CoolingLoop) -> str:
        return _number(loop.rated_flow_lpm)


@admin.register(FacilityMeter)
class FacilityMeterAdmin(ModelAdmin):
    list_display = ("name", "site", "role")
    list_filter = ("site", "role")
    search_fields = ("name", "site__slug")
    list_select_related = ("site",)


# Nodes and GPUs ---------------------------------------------------------------------------


class GPUInline(TabularInline):
    model = GPU
    fields = ("index", "model", "uuid", "slowdown_c", "shutdown_c", "power_limit_max_w")
    extra = 0
    show_change_link = True


@admin.register(Node)
class NodeAdmin(CountingAdmin):
    list_display = ("name", "rack", "position", "model", "gpu_count", "agent")
    list_filter = ("rack__hall__site", "rack__hall", "model")
    search_fields = ("name", "model", "rack__name")
    list_select_related = ("rack__hall__site",)
    # node_info is what the agent last reported; editing it here would be overwritten.
    readonly_fields = ("reported_info",)
    exclude = ("info",)
    inlines = (GPUInline,)
    counted = "gpus"
    gpu_count = children_column("GPUs")

    @admin.display(description="agent")
    def agent(self, node: Node) -> str:
        """Its version, and 'outdated' in words (fleet/agent_versions.py)."""
        return node_agent_support(node.info).in_a_list()

    @admin.display(description="reported by the agent")
    def reported_info(self, node: Node) -> str:
        return pretty_json(node.info)


class AwaitingAcceptance(admin.SimpleListFilter):
    title = "in the inventory"
    parameter_name = "inventory"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("awaiting", "Discovered by an agent, awaiting acceptance"), ("in", "Accepted")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[GPU]) -> QuerySet[GPU]:
        awaiting = {"discovered_at__isnull": False, "accepted_at__isnull": True}
        if self.value() == "awaiting":
            return queryset.filter(**awaiting)
        if self.value() == "in":
            return queryset.exclude(**awaiting)
        return queryset


@admin.action(description="Accept the selected GPUs into the inventory")
def accept_gpus(model_admin: Any, request: HttpRequest, queryset: QuerySet[GPU]) -> None:
    accepted = queryset.filter(discovered_at__isnull=False, accepted_at__isnull=True).update(
        accepted_at=dt.datetime.now(dt.UTC), accepted_by=request.user.get_username()
    )
    model_admin.message_user(request, f"{accepted} GPU(s) accepted into the inventory.")


@admin.register(GPU)
class GPUAdmin(ModelAdmin):
    list_display = (
        "__str__",
        "model",
        "uuid",
        "slowdown",
        "shutdown",
        "power_limit",
        "limits_differ",
        "inventory_status",
    )
    list_filter = (AwaitingAcceptance, LimitsDiffer, "model", "node__rack__hall__site")
    search_fields = ("node__name", "uuid", "model")
    list_select_related = ("node",)
    readonly_fields = (
        "reported_limits",
        "reported_info",
        "discovered_at",
        "accepted_at",
        "accepted_by",
    )
    exclude = ("info",)
    actions = (accept_gpus,)

    @admin.display(description="In the inventory", ordering="accepted_at")
    def inventory_status(self, gpu: GPU) -> str:
        if gpu.discovered_at is None:
            return "from the inventory"
        if gpu.accepted_at is None:
            return "discovered by its agent: awaiting acceptance"
        return f"accepted by {gpu.accepted_by or 'an admin'}"

    @admin.display(description="reported by the agent")
    def reported_info(self, gpu: GPU) -> str:
        return pretty_json(gpu.info)

    # Each limit in force with its origin (fleet/admin_limits.py); blank entered limits
    # on the change page fall back to the agent's, shown read-only beside them.
    @admin.display(description="Slowdown at (°C)", ordering=in_force_ordering("slowdown_c"))
    def slowdown(self, gpu: GPU) -> str:
        return limit_with_origin(gpu, "slowdown_c")

    @admin.display(description="Shutdown at (°C)", ordering=in_force_ordering("shutdown_c"))
    def shutdown(self, gpu: GPU) -> str:
        return limit_with_origin(gpu, "shutdown_c")

    @admin.display(description="Power limit (W)", ordering=in_force_ordering("power_limit_max_w"))
    def power_limit(self, gpu: GPU) -> str:
        return limit_with_origin(gpu, "power_limit_max_w")

    @admin.display(description="Entered limits that differ from the agent's")
    def limits_differ(self, gpu: GPU) -> str:
        return differences_text(gpu)

    @admin.display(description="limits reported by the agent")
    def reported_limits(self, gpu: GPU) -> str:
        return reported_limits_text(gpu)
