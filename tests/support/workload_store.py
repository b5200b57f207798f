"""A node and its workloads snapshots stored as the ingest writer stores them (one
`write_samples` commit on a storage connection of the test's own), on either tier's database:
the interval and GPU-share tests of both tiers use it."""

from __future__ import annotations

from typing import Any

from django.db import connections

from fleet.models import Hall, Node, Rack, Site
from fleet.storage.db import open_db
from fleet.storage.samples import SampleWrite, write_samples
from fleet.storage.workloads import snapshots_of
from tests.support.databases import TierDb


def a_node(db: TierDb) -> tuple[int, int]:
    """A site with one node: (node id, site id)."""
    site = Site.objects.using(db.alias).create(slug="s1", name="Site 1")
    hall = Hall.objects.using(db.alias).create(site=site, name="A")
    rack = Rack.objects.using(db.alias).create(hall=hall, name="A01", power_budget_kw=40)
    node = Node.objects.using(db.alias).create(name="gpu-a01-01", rack=rack)
    return node.id, site.id


def store(db: TierDb, node: tuple[int, int], ts: float, *entries: dict[str, Any]) -> None:
    """The node's workloads snapshot at `ts` (its GPU entries), committed."""
    write = SampleWrite()
    write.workloads = snapshots_of(*node, [{"ts": ts, **e} for e in entries])
    storage = open_db(dict(connections.settings[db.alias]))
    try:
        write_samples(storage, write)
    finally:
        storage.close()
