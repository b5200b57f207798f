"""The capacity tests' hourly rows and inventory: the rack draw and the Demo operator the
capacity page and its answer API read (tests/support/roles.py's cast), and a site of the
test's own database with hourly rack, node and GPU rows (the stranded-capacity statement and
the rack draw series read them)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from django.db import connection, transaction
from django.test import Client

from fleet.models import GPU, CoolingLoop, Hall, Node, PowerFeed, Rack, Site
from fleet.read.capacity import RackCapacity, site_capacity
from tests.support.databases import T, TierDb
from tests.support.roles import person, signed_in

HOUR = 3600
ANSWER_HOURS = 48  # the answer site's hours of steady draw
HGX = "HGX H200 8-GPU"  # 8U; the answer site's one measured node of it draws 10 kW


def seed_hours(rack: str, watts: list[float]) -> None:
    """Hourly rack power means, one per whole hour before now, newest first."""
    rack_id = Rack.objects.get(name=rack).pk
    top = int(time.time() // HOUR) * HOUR - HOUR  # the last whole hour's start
    rows = [(rack_id, top - k * HOUR, 60, w) for k, w in enumerate(watts)]
    with transaction.atomic(), connection.cursor() as cur:
        cur.executemany(
            "INSERT INTO fw_rack_1h (rack_id, bucket, n, power_w_mean) VALUES (%s, %s, %s, %s)",
            rows,
        )


def operator_of_demo() -> Client:
    return signed_in(person("otto", demo="operator"))


def in_window(k: int) -> int:
    """The k-th whole hour before T (k from 0)."""
    return T - (k + 1) * HOUR


class Fleet:
    """One site's inventory in the test's database."""

    def __init__(self, db: TierDb) -> None:
        self.db = db
        self.site = Site.objects.using(db.alias).create(slug="s1", name="Site 1")
        self.hall = Hall.objects.using(db.alias).create(site=self.site, name="Hall A")

    def rack(self, name: str, budget_kw: float) -> Rack:
        return Rack.objects.using(self.db.alias).create(
            hall=self.hall, name=name, power_budget_kw=budget_kw
        )

    def node(self, rack: Rack, name: str, gpus: int = 0, limit_w: float | None = 700) -> Node:
        node = Node.objects.using(self.db.alias).create(name=name, rack=rack)
        GPU.objects.using(self.db.alias).bulk_create(
            GPU(node=node, index=i, model="H200", reported_power_limit_max_w=limit_w)
            for i in range(gpus)
        )
        return node

    def capacity(self) -> dict[str, RackCapacity]:
        return {r.rack: r for r in site_capacity(self.site.pk, T, using=self.db.alias)}


def rack_hours(db: TierDb, rack: Rack, rows: Sequence[tuple[int, float]]) -> None:
    db.insert(
        "fw_rack_1h",
        ("rack_id", "bucket", "n", "power_w_mean"),
        [(rack.pk, b, 60, w) for b, w in rows],
    )


def node_hours(db: TierDb, node: Node, rows: Sequence[tuple[int, float | None]]) -> None:
    db.insert(
        "fw_node_1h",
        ("node_id", "bucket", "n", "power_w_mean"),
        [(node.pk, b, 60, w) for b, w in rows],
    )


def gpu_hours(db: TierDb, node: Node, gpu: int, rows: Sequence[tuple[int, float, float]]) -> None:
    db.insert(
        "fw_gpu_1h",
        ("node_id", "gpu", "bucket", "n", "power_w_mean", "util_gpu_pct_mean"),
        [(node.pk, gpu, b, 60, w, u) for b, w, u in rows],
    )


class AnswerSite:
    """Site 1 of the capacity answer's tests: a measured HGX node drawing 10 kW every hour
    (in rack M01 of its own), and racks each test shapes — budget, steady draw, feeds,
    cooling loop, nodes at given units."""

    def __init__(self, db: TierDb) -> None:
        self.db, self.using = db, db.alias
        self.site = Site.objects.using(self.using).create(slug="s1", name="Site 1")
        self.hall = Hall.objects.using(self.using).create(site=self.site, name="Hall A")
        # the measured server: 10 kW every hour, in a rack of its own
        meter_rack = self.rack("M01", budget_kw=100, draw_kw=10)
        node = Node.objects.using(self.using).create(
            name="m01-n1", rack=meter_rack, position=1, model=HGX
        )
        db.insert(
            "fw_node_1h",
            ("node_id", "bucket", "n", "power_w_mean"),
            [(node.pk, T - (k + 1) * HOUR, 60, 10e3) for k in range(ANSWER_HOURS)],
        )

    def rack(
        self,
        name: str,
        budget_kw: float,
        draw_kw: float,
        feed_amps: tuple[int, ...] = (125, 125),  # 71.9 kW each: never binding
        loop: CoolingLoop | None = None,
        units: tuple[int, ...] = (),
    ) -> Rack:
        rack = Rack.objects.using(self.using).create(
            hall=self.hall,
            name=name,
            power_budget_kw=budget_kw,
            loop=loop,
            cooling="direct_liquid" if loop else "air",
        )
        for letter, amps in zip("ABCD", feed_amps, strict=False):
            PowerFeed.objects.using(self.using).create(rack=rack, name=letter, amperage=amps)
        for u in units:
            Node.objects.using(self.using).create(
                name=f"{name.lower()}-u{u}", rack=rack, position=u, model=HGX
            )
        self.db.insert(
            "fw_rack_1h",
            ("rack_id", "bucket", "n", "power_w_mean"),
            [(rack.pk, T - (k + 1) * HOUR, 60, draw_kw * 1e3) for k in range(ANSWER_HOURS)],
        )
        return rack

    def loop(self, capacity_kw: float) -> CoolingLoop:
        site = self.hall.site
        return CoolingLoop.objects.using(self.using).create(
            site=site, name="CDU-1", capacity_kw=capacity_kw
        )

    def bare_rack(self, name: str, budget_kw: float) -> Rack:
        """A rack with no feeds, loop, nodes or measured draw."""
        return Rack.objects.using(self.using).create(
            hall=self.hall, name=name, power_budget_kw=budget_kw
        )
