"""Each entity's source cadence, read in bulk: the batch interval of whoever sends its data,
and the fields that source declared it refreshes less often (`cadence.fields_s`).

A node's data comes from its own agent (`node:<name>`), or, for GPUs fed by a Prometheus
source, from that source's pulls; a rack's, feed's or loop's from a `rack:`/`loop:`
collector or, usually, the site's facility agent (`site:<slug>`); a site's from its
facility agent. `fleet.health.cadence` turns what was declared into an interval and owns
the judgement (silent, stale, a field stopped); this module only finds, per entity, what
to judge by. A few plain queries whatever the fleet's size (the alert engine, the site
strip and `/metrics` call it once per pass).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from fleet.health import cadence
from fleet.health.cadence import Pace
from fleet.models import CoolingLoop, Node, PowerFeed, PulledGPU, Rack, SourceToken


def token_paces() -> dict[str, Pace]:
    """Source → its batch interval and slower fields, for every source that may still send."""
    rows = SourceToken.objects.filter(revoked=False).values_list(
        "kind", "source", "sample_interval_s", "batch_interval_s", "field_intervals_s"
    )
    return {
        source: Pace(
            cadence.batch_interval_s(kind, sample_s, batch_s),
            fields if isinstance(fields, dict) else {},
        )
        for kind, source, sample_s, batch_s, fields in rows
    }


def token_intervals() -> dict[str, float]:
    """Source → its batch interval, for every source that may still send."""
    return {source: pace.interval_s for source, pace in token_paces().items()}


def _pulled_intervals() -> dict[int, float]:
    """Node id → the slowest pull interval of the Prometheus sources feeding its GPUs."""
    pulled: dict[int, float] = {}
    rows: Any = PulledGPU.objects.values_list("gpu__node_id", "source__pull_interval_s")
    for node_id, pull_s in rows:
        interval = float(pull_s or settings.PROMETHEUS_PULL_S)  # NULL: not pulled since 0018
        pulled[node_id] = max(interval, pulled.get(node_id, 0.0))
    return pulled


def node_intervals(tokens: dict[str, float] | None = None) -> dict[int, float]:
    """Node id → the interval its data comes at: its agent's, else (no agent) the slowest
    Prometheus source feeding its GPUs, else a node agent's default."""
    tokens = token_intervals() if tokens is None else tokens
    pulled = _pulled_intervals()
    default = cadence.DEFAULT_INTERVAL_S["node"]
    return {
        node_id: tokens.get(f"node:{name}") or pulled.get(node_id) or default
        for node_id, name in Node.objects.values_list("id", "name")
    }


def _entity_sources(scope: str) -> dict[int, tuple[str, ...]]:
    """Entity id → the sources that may send its data, its own first, then its site's."""
    if scope in ("node", "gpu"):
        return {nid: (f"node:{name}",) for nid, name in Node.objects.values_list("id", "name")}
    if scope == "site":
        rows = SourceToken.objects.filter(kind="site").values_list("site_id", "source")
        return {site_id: (source,) for site_id, source in rows}
    racks: dict[int, tuple[str, ...]] = {
        rack_id: (f"rack:{slug}/{name}", f"site:{slug}")
        for rack_id, slug, name in Rack.objects.values_list("id", "hall__site__slug", "name")
    }
    if scope == "rack":
        return racks
    if scope == "feed":
        feeds = PowerFeed.objects.values_list("id", "rack_id")
        return {feed_id: racks.get(rack_id, ()) for feed_id, rack_id in feeds}
    if scope == "loop":
        loops = CoolingLoop.objects.values_list("id", "site__slug", "name")
        return {lid: (f"loop:{slug}/{name}", f"site:{slug}") for lid, slug, name in loops}
    return {}


def entity_paces(scope: str, tokens: dict[str, Pace] | None = None) -> dict[int, Pace]:
    """Entity id (the first column of its latest-state key: node, rack, feed, loop or site
    id; a GPU's is its node's) → the pace of the source its data comes from, for `scope`'s
    entities that have one enrolled (or, a node without an agent, a Prometheus source)."""
    tokens = token_paces() if tokens is None else tokens
    out: dict[int, Pace] = {}
    for entity_id, sources in _entity_sources(scope).items():
        pace = next((tokens[s] for s in sources if s in tokens), None)
        if pace is not None:
            out[entity_id] = pace
    if scope in ("node", "gpu"):
        for node_id, interval in _pulled_intervals().items():
            out.setdefault(node_id, Pace(interval, {}))
    return out


def default_interval(scope: str) -> float:
    """The interval for an entity `entity_paces` does not list (none of its sources
    enrolled yet)."""
    return cadence.DEFAULT_INTERVAL_S["node" if scope in ("node", "gpu") else "site"]
