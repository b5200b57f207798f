"""Signals about the sources themselves (fleet/alerts/signals.py, `_SOURCE`): how long an
agent has been silent, computed from what the backend last heard from it
(`SourceToken.last_seen`), read in bulk once per evaluation."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fleet import health
from fleet.alerts.signals import SCOPE_SAMPLE_KIND
from fleet.models import GPU, CoolingLoop, Node, Rack, SourceToken

if TYPE_CHECKING:
    from fleet.alerts.evaluate_state import Params, Snapshot, Values

Key = tuple[int, ...]


def _tokens(snap: Snapshot) -> list[tuple[str, str, int, float | None]]:
    """Every source that may still send: (kind, source, site_id, last_seen), one query."""

    def make() -> list[tuple[str, str, int, float | None]]:
        return list(
            SourceToken.objects.filter(revoked=False).values_list(
                "kind", "source", "site_id", "last_seen"
            )
        )

    return snap.cached("source_tokens", make)  # type: ignore[no-any-return]


def _entity_ids(scope: str) -> dict[str, Key]:
    """Source name → the entity's key in the latest-state tables (one query per scope)."""
    rows: Any
    if scope == "node":
        rows = Node.objects.values_list("name", "id")
        return {f"node:{name}": (nid,) for name, nid in rows}
    if scope == "rack":
        rows = Rack.objects.values_list("hall__site__slug", "name", "id")
        return {f"rack:{slug}/{name}": (rid,) for slug, name, rid in rows}
    if scope == "loop":
        rows = CoolingLoop.objects.values_list("site__slug", "name", "id")
        return {f"loop:{slug}/{name}": (lid,) for slug, name, lid in rows}
    return {}


def silent_intervals(scope: str) -> Callable[[Snapshot, Params], Values]:
    """Intervals since each `scope` source's last batch; a source never heard from (or not
    in the inventory) has no value. A site's facility agent is its site's source."""

    def compute(snap: Snapshot, params: Params) -> Values:
        interval = float(params["interval_s"])
        tokens = [t for t in _tokens(snap) if t[0] == scope]
        ids = (
            {}
            if scope == "site"
            else snap.cached(f"source_ids:{scope}", lambda: _entity_ids(scope))
        )
        out: Values = {}
        for _, source, site_id, last_seen in tokens:
            key = (site_id,) if scope == "site" else ids.get(source)
            if key is None:
                continue
            value = health.silent_intervals(last_seen, snap.now, interval)
            if value is not None or key not in out:
                out[key] = value
        return out

    return compute


def metric_lag(scope: str) -> Callable[[Snapshot, Params], Values]:
    """Seconds the most-lagging field (of `metrics`, default every field) trails the
    entity's newest sample; none while the entity itself is stale (that is silence)."""

    def compute(snap: Snapshot, params: Params) -> Values:
        only = set(params["metrics"] or ())
        out: Values = {}
        for key, reading in snap.readings(SCOPE_SAMPLE_KIND[scope]).items():
            if only:
                values = {n: v for n, v in reading.values.items() if n in only}
                reading = health.Reading(values, reading.ts, health.newest_ts(reading))
            lag = health.field_lag(reading, snap.now)
            out[key] = None if lag is None else lag[1]
        return out

    return compute


def gpu_inventory(snap: Snapshot) -> list[tuple[int, int]]:
    """Every GPU in the inventory as (node_id, index), one query per evaluation."""

    def make() -> list[tuple[int, int]]:
        return list(GPU.objects.values_list("node_id", "index"))

    return snap.cached("gpu_inventory", make)  # type: ignore[no-any-return]


def gpu_missing(snap: Snapshot, params: Params) -> Values:
    """1 for a GPU in the inventory with nothing fresh while its node reports (node or any
    of its GPUs' samples), 0 when it reports, none when the node is silent too."""
    inventory = gpu_inventory(snap)
    gpus = snap.readings("gpu")
    newest: dict[int, float] = {}
    readings = [*snap.readings("node").items(), *gpus.items()]
    for key, reading in readings:
        ts = health.newest_ts(reading)
        if ts is not None and ts > newest.get(key[0], float("-inf")):
            newest[key[0]] = ts
    out: Values = {}
    for node_id, index in inventory:
        node = health.Reading({}, {}, newest.get(node_id))
        missing = health.gpu_missing(gpus.get((node_id, index), health.EMPTY), node, snap.now)
        out[(node_id, index)] = None if missing is None else float(missing)
    return out
