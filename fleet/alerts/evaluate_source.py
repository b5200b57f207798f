"""Signals about the sources themselves (fleet/alerts/signals.py, `_SOURCE`): how long an
agent has been silent, in its own batch intervals, computed from what the backend last
heard from it (`SourceToken.last_seen`, `batch_interval_s`), and how long a field has
lagged, judged by the same cadence; read in bulk once per evaluation."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fleet import health
from fleet.alerts.signals import SCOPE_SAMPLE_KIND
from fleet.models import GPU, CoolingLoop, Node, Rack, SourceToken
from fleet.read import source_cadence

if TYPE_CHECKING:
    from fleet.alerts.evaluate_state import Params, Snapshot, Values

Key = tuple[int, ...]


def _tokens(snap: Snapshot) -> list[tuple[str, str, int, float | None, float]]:
    """Every source that may still send: (kind, source, site_id, last_seen, its batch
    interval), one query."""

    def make() -> list[tuple[str, str, int, float | None, float]]:
        rows = SourceToken.objects.filter(revoked=False).values_list(
            "kind", "source", "site_id", "last_seen", "sample_interval_s", "batch_interval_s"
        )
        return [
            (kind, source, site_id, last_seen, health.batch_interval_s(kind, sample_s, batch_s))
            for kind, source, site_id, last_seen, sample_s, batch_s in rows
        ]

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


def _override(params: Params) -> float | None:
    """A rule's `interval_s`, when it sets one: every source judged by it instead of its
    own declared interval (docs/rules.md)."""
    value = params.get("interval_s")
    return None if value is None else float(value)


def silent_intervals(scope: str) -> Callable[[Snapshot, Params], Values]:
    """Batch intervals since each `scope` source's last batch, each counted in the source's
    own batch interval (fleet.health.cadence); a source never heard from (or not in the
    inventory) has no value. A site's facility agent is its site's source."""

    def compute(snap: Snapshot, params: Params) -> Values:
        override = _override(params)
        tokens = [t for t in _tokens(snap) if t[0] == scope]
        ids = (
            {}
            if scope == "site"
            else snap.cached(f"source_ids:{scope}", lambda: _entity_ids(scope))
        )
        out: Values = {}
        for _, source, site_id, last_seen, interval in tokens:
            key = (site_id,) if scope == "site" else ids.get(source)
            if key is None:
                continue
            value = health.silent_intervals(last_seen, snap.now, override or interval)
            if value is not None or key not in out:
                out[key] = value
        return out

    return compute


def _paces(snap: Snapshot, scope: str) -> dict[int, health.Pace]:
    """Entity id (a GPU's: its node's) → the pace of the source its data comes from: a few
    plain queries per evaluation, shared by the scopes that read the same."""
    shared = "node" if scope == "gpu" else scope
    tokens = snap.cached("source_token_paces", source_cadence.token_paces)
    return snap.cached(  # type: ignore[no-any-return]
        f"source_paces:{shared}", lambda: source_cadence.entity_paces(shared, tokens)
    )


def metric_lag(scope: str) -> Callable[[Snapshot, Params], Values]:
    """Seconds the most-lagging field (of `metrics`, default every field) trails the
    entity's newest sample, judged by the entity's source cadence: none while the entity
    itself is stale (that is silence), 0 while every field keeps its own pace (the source's
    batch interval, or the slower one it declared for that field)."""

    def compute(snap: Snapshot, params: Params) -> Values:
        only = set(params["metrics"] or ())
        override = _override(params)
        paces = {} if override else _paces(snap, scope)
        default = health.Pace(override or source_cadence.default_interval(scope), {})
        stale_after = {default.interval_s: health.stale_after_s(default.interval_s)}
        out: Values = {}
        for key, reading in snap.readings(SCOPE_SAMPLE_KIND[scope]).items():
            if only:
                values = {n: v for n, v in reading.values.items() if n in only}
                reading = health.Reading(values, reading.ts, health.newest_ts(reading))
            pace = paces.get(key[0], default)
            if pace.fields_s:
                out[key] = health.slow_field_lag(reading, snap.now, pace)
                continue
            interval = pace.interval_s
            after = stale_after.get(interval)
            if after is None:
                after = stale_after[interval] = health.stale_after_s(interval)
            lag = health.field_lag(reading, snap.now, after)
            out[key] = None if lag is None else health.lag_beyond_cadence(lag[1], interval)
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
