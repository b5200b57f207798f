"""Who held and used each GPU, read-only: workloads and their GPU intervals as the ingest
writer stored them (fleet/storage/workloads.py). The admin is fleet-wide (fleet/access.py:
administering has no per-site form), so the lists filter by site rather than hide one."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from fleet.admin_base import RecordAdmin
from fleet.admin_display import epoch_text
from fleet.models import GpuAllocation, Workload


class ReadOnlyRecordAdmin(RecordAdmin):
    """Nor deleted here: an interval is what an agent reported, not an inventory entry."""

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Workload)
class WorkloadAdmin(ReadOnlyRecordAdmin):
    """Each pod, Slurm job, container or user seen on a GPU, with its owner."""

    list_display = ("__str__", "owner", "site", "seen_first")
    list_filter = ("site", "kind")
    search_fields = ("key", "namespace", "pod", "job", "user", "account")
    list_select_related = ("site",)
    readonly_fields = tuple(f.name for f in Workload._meta.fields)

    @admin.display(description="first seen", ordering="first_seen")
    def seen_first(self, workload: Workload) -> str:
        return epoch_text(workload.first_seen)


class OpenFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("open", "Open"), ("ended", "Ended")]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        if self.value() in ("open", "ended"):
            return queryset.filter(ended__isnull=self.value() == "open")
        return queryset


@admin.register(GpuAllocation)
class GpuAllocationAdmin(ReadOnlyRecordAdmin):
    """Workload ↔ GPU intervals: open while `ended` is blank; a silent node's stay open,
    known until `last seen`."""

    list_display = (
        "workload",
        "node",
        "gpu",
        "mig_device",
        "source",
        "since",
        "seen_last",
        "until",
        "pid",
        "memory_mib",
    )
    list_filter = (OpenFilter, "source", "site", "workload__kind")
    search_fields = ("node__name", "workload__key", "workload__namespace", "workload__user")
    list_select_related = ("node", "workload")
    readonly_fields = tuple(f.name for f in GpuAllocation._meta.fields)

    @admin.display(description="MIG device", ordering="mig")
    def mig_device(self, allocation: GpuAllocation) -> str:
        return allocation.mig or "—"

    @admin.display(description="started", ordering="started")
    def since(self, allocation: GpuAllocation) -> str:
        return epoch_text(allocation.started)

    @admin.display(description="last seen", ordering="last_seen")
    def seen_last(self, allocation: GpuAllocation) -> str:
        return epoch_text(allocation.last_seen)

    @admin.display(description="ended", ordering="ended")
    def until(self, allocation: GpuAllocation) -> str:
        return "open" if allocation.ended is None else epoch_text(allocation.ended)
