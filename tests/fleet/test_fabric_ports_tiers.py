"""Fabric ports on every database tier: the same reads, stored through the one write path
from a storage connection of the writer's own (SQLite and PostgreSQL), keep the same port
row and make the same flap event once, however often the batch is resent."""

from __future__ import annotations

from typing import Any

from django.db import connections

from fleet.health import fabric as judge
from fleet.models import Event, FabricPort, Hall, Node, Rack, Site
from fleet.storage.db import open_db
from fleet.storage.fabric import LINK_DOWN, LINK_FLAP, FabricWrite
from fleet.storage.samples import SampleWrite, write_samples
from tests.support import databases
from tests.support.databases import T, TierDb

db = databases.fresh_tier_db  # each test's own database, both tiers


def a_node(db: TierDb) -> int:
    site = Site.objects.using(db.alias).create(slug="s1", name="Site 1")
    hall = Hall.objects.using(db.alias).create(site=site, name="A")
    rack = Rack.objects.using(db.alias).create(hall=hall, name="A01", power_budget_kw=40)
    return Node.objects.using(db.alias).create(name="gpu-a01-01", rack=rack).id


def store(db: TierDb, node_id: int, seq: int, ts: float, state: str, link_downed: int) -> None:
    entry: dict[str, Any] = {
        "ts": ts,
        "device": "mlx5_3",
        "port": 1,
        "state": state,
        "link_layer": "InfiniBand",
        "counters": {"link_downed": link_downed, "symbol_error": 2 * seq},
    }
    write = SampleWrite()
    write.fabric = [FabricWrite(node_id, "node:gpu-a01-01", seq, [entry])]
    storage = open_db(dict(connections.settings[db.alias]))
    try:
        write_samples(storage, write)
    finally:
        storage.close()


def test_a_flap_and_a_link_down_are_stored_once_on_every_tier(db: TierDb) -> None:
    node_id = a_node(db)
    store(db, node_id, 1, T, "ACTIVE", 0)
    store(db, node_id, 2, T + 10, "DOWN", 1)
    store(db, node_id, 2, T + 10, "DOWN", 1)  # resent
    events = Event.objects.using(db.alias).order_by("pos")
    assert [(e.kind, e.code, e.node_id, e.ts) for e in events] == [
        (LINK_FLAP, 1, node_id, T + 10),
        (LINK_DOWN, 0, node_id, T + 10),
    ]
    stored = FabricPort.objects.using(db.alias).get()
    assert (stored.state, stored.first_seen, stored.ts) == ("DOWN", T, T + 10)
    assert stored.counters == {"link_downed": 1, "symbol_error": 4}
    assert stored.rises == {"link_downed": 1, "symbol_error": 2}


def test_the_rate_checkpoints_and_last_active_are_kept_on_every_tier(db: TierDb) -> None:
    node_id = a_node(db)
    store(db, node_id, 1, T, "ACTIVE", 0)  # symbol_error 2: first seen, no rise
    store(db, node_id, 2, T + 150, "ACTIVE", 0)  # 4
    store(db, node_id, 3, T + 300, "DOWN", 0)  # 6: five minutes on, a checkpoint
    stored = FabricPort.objects.using(db.alias).get()
    assert stored.last_active == T + 150
    assert stored.rate_base == {"ts": T, "rises": {"link_downed": 0, "symbol_error": 0}}
    assert stored.rate_next == {"ts": T + 300, "rises": {"link_downed": 0, "symbol_error": 4}}
    base = judge.Checkpoint.of(stored.rate_base)
    assert judge.rate_per_hour(base, stored.ts, stored.rises, "symbol_error") == 48.0
