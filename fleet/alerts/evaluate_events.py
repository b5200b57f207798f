"""`events:` signals (fleet/alerts/signals.py): stored agent events (fleet.models.Event) of
one kind per GPU within the rule's `window_s`, counted by one grouped query per rule.

An off-the-bus event (XID 79, `gpu_lost`) stops counting once its GPU sends a sample
REPORTS_AGAIN_AFTER_S after the last of them: the GPU was reset and is back, so its
incident can end then instead of when the window runs out."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db.models import Count, Max

from fleet import health
from fleet.alerts.evaluate_source import gpu_inventory
from fleet.health.lost import OFF_THE_BUS_XID, REPORTS_AGAIN_AFTER_S
from fleet.models import Event

if TYPE_CHECKING:
    from fleet.alerts.evaluate_state import Params, Snapshot, Values


def event_count(kind: str) -> Callable[[Snapshot, Params], Values]:
    """Events of `kind` (with one of `codes`, where the signal takes them) per GPU in
    (now - window_s, now]; every GPU in the inventory has a count, 0 when it had none, so
    an instance resolves once its events leave the window."""

    def compute(snap: Snapshot, params: Params) -> Values:
        window = float(params["window_s"])
        rows = Event.objects.filter(
            kind=kind,
            ts__gt=snap.now - window,
            ts__lte=snap.now,
            node__isnull=False,
            gpu_index__isnull=False,
        )
        if "codes" in params:
            rows = rows.filter(code__in=[int(c) for c in params["codes"] or ()])
        counts = (
            rows.values_list("node_id", "gpu_index", "code")
            .annotate(n=Count("id"), last=Max("ts"))
            .order_by()
        )
        gpus = snap.readings("gpu")
        out: Values = dict.fromkeys(gpu_inventory(snap), 0.0)
        for node_id, index, code, n, last in counts:
            key = (node_id, index)
            if _off_the_bus(kind, code) and _reports_since(gpus.get(key), last):
                continue
            out[key] = (out.get(key) or 0.0) + float(n)
        return out

    return compute


def _off_the_bus(kind: str, code: int | None) -> bool:
    return kind == "gpu_lost" or (kind == "xid" and code == OFF_THE_BUS_XID)


def _reports_since(reading: health.Reading | None, last_event_ts: float) -> bool:
    """The GPU sent a sample well after its last off-the-bus event: it is back."""
    newest = None if reading is None else health.newest_ts(reading)
    return newest is not None and newest >= last_event_ts + REPORTS_AGAIN_AFTER_S
