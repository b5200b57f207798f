"""`events:` signals (fleet/alerts/signals.py): stored agent events (fleet.models.Event) of
one kind per GPU within the rule's `window_s`, counted by one grouped query per rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db.models import Count

from fleet.alerts.evaluate_source import gpu_inventory
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
        counts = rows.values_list("node_id", "gpu_index").annotate(n=Count("id")).order_by()
        out: Values = dict.fromkeys(gpu_inventory(snap), 0.0)
        for node_id, index, n in counts:
            out[(node_id, index)] = float(n)
        return out

    return compute
