"""The ingest writer's view of the inventory: names on the wire → row ids.

Loaded with plain SQL (the writer process does not start Django) and reloaded
when a name is missing, at most every `RELOAD_MIN_S`, so an entity added in the
admin starts accepting data within seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fleet.ingest.store import Store

RELOAD_MIN_S = 2.0


@dataclass(slots=True)
class NodeRef:
    id: int
    rack_id: int
    site_id: int


@dataclass(slots=True)
class GpuLimits:
    slowdown_c: float | None
    tlimit_slowdown_c: float | None


@dataclass
class Inventory:
    nodes: dict[str, NodeRef] = field(default_factory=dict)
    sites: dict[str, int] = field(default_factory=dict)
    racks: dict[tuple[int, str], int] = field(default_factory=dict)
    rack_site: dict[int, int] = field(default_factory=dict)
    feeds: dict[tuple[int, str], int] = field(default_factory=dict)
    loops: dict[tuple[int, str], int] = field(default_factory=dict)
    gpus: dict[tuple[int, int], GpuLimits] = field(default_factory=dict)
    loaded_at: float = 0.0

    def load(self, store: Store) -> None:
        self.nodes = {
            name: NodeRef(nid, rack_id, site_id)
            for nid, name, rack_id, site_id in store.execute(
                "SELECT n.id, n.name, n.rack_id, h.site_id FROM fleet_node n "
                "JOIN fleet_rack r ON r.id = n.rack_id JOIN fleet_hall h ON h.id = r.hall_id"
            )
        }
        self.sites = {slug: sid for sid, slug in store.execute("SELECT id, slug FROM fleet_site")}
        racks = store.execute(
            "SELECT r.id, r.name, h.site_id FROM fleet_rack r JOIN fleet_hall h ON h.id = r.hall_id"
        )
        self.racks = {(site_id, name): rid for rid, name, site_id in racks}
        self.rack_site = {rid: site_id for rid, _, site_id in racks}
        self.feeds = {
            (rack_id, name): fid
            for fid, rack_id, name in store.execute("SELECT id, rack_id, name FROM fleet_powerfeed")
        }
        self.loops = {
            (site_id, name): lid
            for lid, site_id, name in store.execute(
                "SELECT id, site_id, name FROM fleet_coolingloop"
            )
        }
        self.gpus = {
            (node_id, index): GpuLimits(slowdown, tlimit)
            for node_id, index, slowdown, tlimit in store.execute(
                'SELECT node_id, "index", slowdown_c, tlimit_slowdown_c FROM fleet_gpu'
            )
        }
        self.loaded_at = time.monotonic()

    def maybe_reload(self, store: Store) -> bool:
        """Reload after a miss, unless we just did. True if reloaded."""
        if time.monotonic() - self.loaded_at < RELOAD_MIN_S:
            return False
        self.load(store)
        return True
