"""Who holds each GPU now, as the alert engine sees it, and the `allocated_idle` signal.

A GPU is held while an open scheduler allocation names it (pod-resources, Slurm GRES) or a
pulled dcgm-exporter series does (`exporter`); a process seen on a GPU no allocation names
is no allocation (docs/ledger.md, "Held"). The open allocations are read once per
evaluation, in one query with their workloads, and only when a rule or a new GPU alert
needs them. Idle is judged with the energy ledger's own thresholds
(fleet/read/ledger_rules.py `DEFAULT_RULES`), so the alert and the ledger agree on what an
idle allocation is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleet.models import GpuAllocation
from fleet.read.ledger_rules import DEFAULT_RULES, LedgerRules
from fleet.read.teams import team_of, workload_name

if TYPE_CHECKING:
    from fleet.alerts.evaluate_state import Snapshot, Values
    from fleet.alerts.models import AlertInstance

__all__ = (
    "HOLDING_SOURCES",
    "WORKLOAD_ID_LABEL",
    "Holder",
    "allocated_idle",
    "holders",
    "is_idle",
    "label_holders",
    "open_holders",
)

# Allocation sources that hold a GPU (fleet/models/workloads.py AllocationSource; the
# exporter's is a documented value without a choice of its own).
HOLDING_SOURCES = ("scheduler", "exporter")
# The label that keeps an instance's workload: alerts of one workload group together.
WORKLOAD_ID_LABEL = "workload_id"


@dataclass(frozen=True, slots=True)
class Holder:
    """The workload that holds a GPU, in the words summaries and routes use."""

    workload_id: int
    owner: str  # namespace or Slurm account: what a route's `owner` filter names
    user: str
    workload: str  # "train-0", "job 1001"

    def labels(self) -> dict[str, str]:
        return {
            "owner": self.owner,
            "user": self.user,
            "workload": self.workload,
            WORKLOAD_ID_LABEL: str(self.workload_id),
        }


def open_holders() -> dict[tuple[int, int], Holder]:
    """Every held GPU's holder, by (node id, GPU index), in one query. A GPU held by
    several workloads (time slicing, MIG devices) is named by the first by key, as the
    exporter's pod labels are."""
    rows = (
        GpuAllocation.objects.filter(ended__isnull=True, source__in=HOLDING_SOURCES)
        .order_by("node_id", "gpu", "workload__key")
        .values_list(
            "node_id",
            "gpu",
            "workload_id",
            "workload__kind",
            "workload__key",
            "workload__namespace",
            "workload__account",
            "workload__user",
            "workload__pod",
            "workload__job",
        )
    )
    out: dict[tuple[int, int], Holder] = {}
    for node_id, gpu, wid, kind, key, namespace, account, user, pod, job in rows:
        if (node_id, gpu) not in out:
            name = workload_name(kind, key, pod, job)
            out[(node_id, gpu)] = Holder(wid, team_of(namespace, account), user, name)
    return out


def holders(snap: Snapshot) -> dict[tuple[int, int], Holder]:
    """The open holders, read once per evaluation."""
    return snap.cached("holders", open_holders)  # type: ignore[no-any-return]


def is_idle(
    util_pct: float, power_w: float, limit_w: float | None, rules: LedgerRules = DEFAULT_RULES
) -> bool:
    """The ledger's idle test on one reading: utilisation under `idle_util_pct` and power at
    most `idle_power_fraction` of the limit in force (`idle_power_w` without one)."""
    near_idle = rules.idle_power_fraction * limit_w if limit_w else rules.idle_power_w
    return util_pct < rules.idle_util_pct and power_w <= near_idle


def _latest(snap: Snapshot, metric: str) -> Values:
    # the same cache entry a rule on the raw metric reads (evaluate_state.values_for)
    return snap.cached(f"gpu:{metric}", lambda: snap.fresh("gpu", metric))  # type: ignore[no-any-return]


def allocated_idle(snap: Snapshot) -> Values:
    """1 for a held GPU whose latest utilisation and power are idle, 0 for a held busy one;
    a GPU nothing holds, or without a fresh utilisation and power, has no value."""
    held = holders(snap)
    if not held:
        return {}
    util, power = _latest(snap, "util_gpu_pct"), _latest(snap, "power_w")
    limit = _latest(snap, "power_limit_w")
    out: Values = {}
    for key in held:
        u, p = util.get(key), power.get(key)
        if u is not None and p is not None:
            out[key] = 1.0 if is_idle(u, p, limit.get(key)) else 0.0
    return out


def label_holders(created: Iterable[AlertInstance], snap: Snapshot) -> None:
    """Name each new GPU instance's holder among its labels (owner, user, workload), so
    summaries, routes and silences can use them; fixed when it starts, as its place is."""
    gpu = [inst for inst in created if inst.scope == "gpu"]
    if not gpu:
        return
    held = holders(snap)
    for inst in gpu:
        parts = inst.entity.split(":")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            continue
        holder = held.get((int(parts[0]), int(parts[1])))
        if holder is not None:
            inst.labels = {**holder.labels(), **inst.labels}
