"""Each entity's source cadence, read in bulk: the batch interval of whoever sends its data.

A node's data comes from its own agent (`node:<name>`), or, for GPUs fed by a Prometheus
source, from that source's pulls; a rack's, feed's or loop's from a `rack:`/`loop:`
collector or, usually, the site's facility agent (`site:<slug>`); a site's from its
facility agent. `fleet.health.cadence` turns what was declared into an interval and owns
the judgement (silent, stale); this module only finds, per entity, the interval to judge
by. A few plain queries whatever the fleet's size (the alert engine, the site strip and
`/metrics` call it once per pass).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from fleet.health import cadence
from fleet.models import CoolingLoop, Node, PowerFeed, PulledGPU, Rack, SourceToken


def token_intervals() -> dict[str, float]:
    """Source → its batch interval, for every source that may still send."""
    rows = SourceToken.objects.filter(revoked=False).values_list(
        "kind", "source", "sample_interval_s", "batch_interval_s"
    )
    return {
        source: cadence.batch_interval_s(kind, sample_s, batch_s)
        for kind, source, sample_s, batch_s in rows
    }


def node_intervals(tokens: dict[str, float] | None = None) -> dict[int, float]:
    """Node id → the interval its data comes at: its agent's, else (no agent) the slowest
    Prometheus source feeding its GPUs, else a node agent's default."""
    tokens = token_intervals() if tokens is None else tokens
    pulled: dict[int, float] = {}
    rows: Any = PulledGPU.objects.values_list("gpu__node_id", "source__pull_interval_s")
    for node_id, pull_s in rows:
        interval = float(pull_s or settings.PROMETHEUS_PULL_S)  # NULL: not pulled since 0018
        pulled[node_id] = max(interval, pulled.get(node_id, 0.0))
    default = cadence.DEFAULT_INTERVAL_S["node"]
    return {
        node_id: tokens.get(f"node:{name}") or pulled.get(node_id) or default
        for node_id, name in Node.objects.values_list("id", "name")
    }


def site_intervals(tokens: dict[str, float] | None = None) -> dict[int, float]:
    """Site id → its facility agent's interval (the default for a site without one)."""
    tokens = token_intervals() if tokens is None else tokens
    rows = SourceToken.objects.filter(revoked=False, kind="site").values_list("site_id", "source")
    by_site = {site_id: tokens[source] for site_id, source in rows if source in tokens}
    return by_site


def entity_intervals(scope: str, tokens: dict[str, float] | None = None) -> dict[int, float]:
    """Entity id (the first column of its latest-state key: node, rack, feed, loop or site
    id; a GPU's is its node's) → its source's interval, for `scope`'s entities."""
    tokens = token_intervals() if tokens is None else tokens
    if scope in ("node", "gpu"):
        return node_intervals(tokens)
    sites = site_intervals(tokens)
    default = cadence.DEFAULT_INTERVAL_S["site"]
    if scope == "site":
        return sites
    racks: dict[int, float] = {}
    for rack_id, slug, name, site_id in Rack.objects.values_list(
        "id", "hall__site__slug", "name", "hall__site_id"
    ):
        racks[rack_id] = tokens.get(f"rack:{slug}/{name}") or sites.get(site_id) or default
    if scope == "rack":
        return racks
    if scope == "feed":
        feeds = PowerFeed.objects.values_list("id", "rack_id")
        return {feed_id: racks.get(rack_id, default) for feed_id, rack_id in feeds}
    if scope == "loop":
        loops = CoolingLoop.objects.values_list("id", "site__slug", "name", "site_id")
        return {
            loop_id: tokens.get(f"loop:{slug}/{name}") or sites.get(site_id) or default
            for loop_id, slug, name, site_id in loops
        }
    return {}


def default_interval(scope: str) -> float:
    """The interval for an entity `entity_intervals` does not list (none of its sources
    enrolled yet)."""
    return cadence.DEFAULT_INTERVAL_S["node" if scope in ("node", "gpu") else "site"]
