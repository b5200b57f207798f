"""The ingest child's view of the inventory: names on the wire → row ids.

Loaded with plain SQL (the ingest child process does not start Django) and reloaded
when a name is missing, at most every `RELOAD_MIN_S`, so an entity added in the
admin starts accepting data within seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fleet.storage.db import Database

RELOAD_MIN_S = 2.0


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
        self.loaded_at = time.monotonic()

    def maybe_reload(self, db: Database) -> bool:
        """Reload after a miss, unless we just did. True if reloaded."""
        if time.monotonic() - self.loaded_at < RELOAD_MIN_S:
            return False
        self.load(db)
        return True
