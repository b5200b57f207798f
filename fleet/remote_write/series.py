"""What remote write calls each raw field and which labels a series carries: the one owner.

Names: `fleetwatch_raw_<kind>_<field>`, the field as the metric catalogue names it
(agents/protocol/metrics.py), unit suffix and all (`fleetwatch_raw_gpu_power_w`,
`fleetwatch_raw_gpu_temp_gpu_c`). /metrics has no per-field names to reuse: it exports
derived figures in base units (`fleetwatch_gpu_power_watts` is the latest fresh power, its
SM clock is in hertz), so the raw samples get a prefix of their own and never collide with
a scraped /metrics series.

Labels are bounded by the inventory — site (slug), rack, node, GPU index and UUID, feed,
loop — never a job, pod, user or other value that grows without bound. `LABELS` lists each
kind's; `ALLOWED_LABELS` is every name anything shipped may carry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from agents.protocol.metrics import METRICS
from fleet.remote_write.wire import encode_labels

__all__ = (
    "ALLOWED_LABELS",
    "KINDS",
    "LABELS",
    "PREFIX",
    "EntityLabels",
    "entity_labels",
    "metric_name",
    "series_labels",
)

PREFIX = "fleetwatch_raw_"

# Every sample kind is shipped: each is keyed by inventory entities only.
LABELS: dict[str, tuple[str, ...]] = {
    "gpu": ("site", "rack", "node", "gpu", "uuid"),
    "node": ("site", "rack", "node"),
    "rack": ("site", "rack"),
    "feed": ("site", "rack", "feed"),
    "loop": ("site", "loop"),
    "facility": ("site",),
}
KINDS: tuple[str, ...] = tuple(k for k in METRICS if k in LABELS)
ALLOWED_LABELS: frozenset[str] = frozenset({"__name__"} | {n for ls in LABELS.values() for n in ls})

# An entity's labels, by its key as the raw table stores it (ids).
EntityLabels = dict[tuple[int, ...], tuple[tuple[str, str], ...]]


def metric_name(kind: str, field: str) -> str:
    return f"{PREFIX}{kind}_{field}"


def series_labels(kind: str, field: str, entity: tuple[tuple[str, str], ...]) -> bytes:
    """The encoded label set of one field of one entity (`wire.encode_labels`)."""
    return encode_labels((("__name__", metric_name(kind, field)), *entity))


_NODE_PLACE = (
    "SELECT n.id, s.slug, r.name, n.name FROM fleet_node n JOIN fleet_rack r ON r.id = n.rack_id"
    " JOIN fleet_hall h ON h.id = r.hall_id JOIN fleet_site s ON s.id = h.site_id"
)
_PLACES: dict[str, str] = {
    "rack": "SELECT r.id, s.slug, r.name FROM fleet_rack r JOIN fleet_hall h ON h.id = r.hall_id"
    " JOIN fleet_site s ON s.id = h.site_id",
    "feed": "SELECT f.id, s.slug, r.name, f.name FROM fleet_powerfeed f"
    " JOIN fleet_rack r ON r.id = f.rack_id JOIN fleet_hall h ON h.id = r.hall_id"
    " JOIN fleet_site s ON s.id = h.site_id",
    "loop": "SELECT l.id, s.slug, l.name FROM fleet_coolingloop l"
    " JOIN fleet_site s ON s.id = l.site_id",
    "facility": "SELECT s.id, s.slug FROM fleet_site s",
}


def _select(sql: str, using: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with connections[using].cursor() as cur:
        cur.execute(sql, list(params))
        return list(cur.fetchall())


def entity_labels(kind: str, using: str = DEFAULT_DB_ALIAS) -> EntityLabels:
    """Every inventory entity of `kind` with its labels (one or two queries, not per row).
    A GPU is placed by its node: a GPU the inventory does not list yet still ships, without
    a UUID."""
    names = LABELS[kind]
    if kind in ("gpu", "node"):
        nodes = {int(r[0]): tuple(str(v) for v in r[1:]) for r in _select(_NODE_PLACE, using)}
        if kind == "node":
            return {(n,): tuple(zip(names, place, strict=True)) for n, place in nodes.items()}
        labels: EntityLabels = {}
        uuids = _select('SELECT node_id, "index", uuid FROM fleet_gpu', using)
        known = {(int(n), int(i)): str(u or "") for n, i, u in uuids}
        for node_id, place in nodes.items():
            labels[(node_id, -1)] = tuple(zip(names[:3], place, strict=True))
        for (node_id, index), uuid in known.items():
            where = nodes.get(node_id)
            if where is not None:
                labels[(node_id, index)] = (
                    *zip(names[:3], where, strict=True),
                    ("gpu", str(index)),
                    ("uuid", uuid),
                )
        return labels
    rows = _select(_PLACES[kind], using)
    return {(int(r[0]),): tuple(zip(names, (str(v) for v in r[1:]), strict=True)) for r in rows}


def labels_of(kind: str, key: tuple[int, ...], known: EntityLabels) -> tuple[tuple[str, str], ...]:
    """The labels of the entity `key`, or () when the inventory no longer has it."""
    found = known.get(key)
    if found is not None or kind != "gpu":
        return found or ()
    node = known.get((key[0], -1))
    return () if node is None else (*node, ("gpu", str(key[1])))
