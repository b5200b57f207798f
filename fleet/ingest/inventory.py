"""The ingest child's view of the inventory: names on the wire → row ids.

Loaded with plain SQL (the ingest child process does not start Django) and reloaded
when a name is missing, at most every `RELOAD_MIN_S`, so an entity added in the
admin starts accepting data within seconds.

It also holds, per node, the GPU indexes whose samples may be stored: the inventory's
own GPUs and those an admin accepted from discovery (docs/inventory.md). A batch naming
another index rechecks that node's GPUs alone, at most every `RELOAD_MIN_S` per node, so
an accepted GPU's data flows within seconds and a node that keeps sending an unknown
index costs one small query per interval, not a reload of the fleet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fleet.storage.db import Database

RELOAD_MIN_S = 2.0
_clock = time.monotonic  # tests pass time by hand


@dataclass(slots=True)
class NodeRef:
    id: int
    rack_id: int
    site_id: int


@dataclass
class Inventory:
    nodes: dict[str, NodeRef] = field(default_factory=dict)
    racks: dict[tuple[int, str], int] = field(default_factory=dict)
    feeds: dict[tuple[int, str], int] = field(default_factory=dict)
    loops: dict[tuple[int, str], int] = field(default_factory=dict)
    gpus: dict[int, frozenset[int]] = field(default_factory=dict)  # node id → admitted indexes
    gpus_checked_at: dict[int, float] = field(default_factory=dict)  # node id → monotonic
    loaded_at: float = 0.0

    def load(self, db: Database) -> None:
        self.nodes = {
            name: NodeRef(nid, rack_id, site_id)
            for nid, name, rack_id, site_id in db.query(
                "SELECT n.id, n.name, n.rack_id, h.site_id FROM fleet_node n "
                "JOIN fleet_rack r ON r.id = n.rack_id JOIN fleet_hall h ON h.id = r.hall_id"
            )
        }
        racks = db.query(
            "SELECT r.id, r.name, h.site_id FROM fleet_rack r JOIN fleet_hall h ON h.id = r.hall_id"
        )
        self.racks = {(site_id, name): rid for rid, name, site_id in racks}
        self.feeds = {
            (rack_id, name): fid
            for fid, rack_id, name in db.query("SELECT id, rack_id, name FROM fleet_powerfeed")
        }
        self.loops = {
            (site_id, name): lid
            for lid, site_id, name in db.query("SELECT id, site_id, name FROM fleet_coolingloop")
        }
        admitted: dict[int, set[int]] = {}
        for node_id, index in db.query(_ADMITTED_GPUS):
            admitted.setdefault(node_id, set()).add(index)
        self.gpus = {node_id: frozenset(indexes) for node_id, indexes in admitted.items()}
        self.gpus_checked_at = {}
        self.loaded_at = _clock()

    def maybe_reload(self, db: Database) -> bool:
        """Reload after a miss, unless we just did. True if reloaded."""
        if _clock() - self.loaded_at < RELOAD_MIN_S:
            return False
        self.load(db)
        return True

    def admitted_gpus(self, db: Database, node_id: int, wanted: set[int]) -> frozenset[int]:
        """The node's GPU indexes that may store samples; rechecked (that node only, at
        most every `RELOAD_MIN_S`) when `wanted` holds one the cache lacks."""
        known = self.gpus.get(node_id, frozenset())
        if wanted <= known:
            return known
        now = _clock()
        if now - max(self.loaded_at, self.gpus_checked_at.get(node_id, 0.0)) < RELOAD_MIN_S:
            return known
        rows = db.query(f"{_ADMITTED_GPUS} AND node_id = %s", (node_id,))
        known = frozenset(index for _, index in rows)
        self.gpus[node_id] = known
        self.gpus_checked_at[node_id] = now
        return known


# The inventory's own GPUs (never discovered) and the discovered ones an admin accepted.
_ADMITTED_GPUS = (
    'SELECT node_id, "index" FROM fleet_gpu'
    " WHERE (discovered_at IS NULL OR accepted_at IS NOT NULL)"
)
