"""Headroom-by-rack benchmark: `.venv/bin/python bench/headroom.py [--racks N] [--days D]`.

A site of N racks (500 by default; 45 kW budgets, two feeds of 63 or 80 A, one CDU per ten
racks) of 8U HGX H200 nodes at U1, U9, U17, U25 (and U33 in every fifth rack), 4 GPUs each,
with D days (30: the capacity window) of hourly means for every rack PDU, node meter and GPU:
what the capacity figures read (docs/ui.md "Capacity"), then ANALYZE (as autovacuum would).

Timed, median of `--repeat`: `headroom_s`, the page `/capacity/headroom/?site=…` as a
signed-in superuser gets it (the site's models with their measured power, every rack's
constraints, the table rendered), `can_take_s`, one rack's answer, and `capacity_page_s`, the
capacity page of the site with its question form (its models' measured power included); once
each, the parts: `site_capacity` (the capacity page's read, for comparison), `model_p95`
(every model's measured per-server power) and `site_room` (every rack's constraint facts).
SQLite always; PostgreSQL too when DATABASE_URL is set. Last line per database:
`db=… racks=… gpus=… headroom_s=… can_take_s=… capacity_page_s=… statements=…`.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ledger import insert, make_database  # noqa: E402, I001  (sets Django up first)
from django.contrib.auth.models import User  # noqa: E402
from django.db import DEFAULT_DB_ALIAS, connections  # noqa: E402
from django.test import RequestFactory  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from dashboard.capacity import capacity_view  # noqa: E402
from dashboard.capacity_headroom import headroom_view  # noqa: E402
from fleet.models import GPU, CoolingLoop, Hall, Node, PowerFeed, Rack, Site  # noqa: E402
from fleet.read.capacity import site_capacity  # noqa: E402
from fleet.read.capacity_answer import can_take  # noqa: E402
from fleet.read.rack_room import measured_server_ws, site_room  # noqa: E402
from tests.support import services  # noqa: E402

HOUR, DAY = 3600, 86_400
MODEL, GPUS_PER_NODE, RACKS_PER_LOOP = "HGX H200 8-GPU", 4, 10
NODE_W = 5_000.0  # a node's meter: 4 GPUs at ~700 W and its host


@contextmanager
def as_default(alias: str) -> Iterator[None]:
    """The bench database as Django's default: the page reads the default."""
    before = connections[DEFAULT_DB_ALIAS]
    connections[DEFAULT_DB_ALIAS] = connections[alias]
    try:
        yield
    finally:
        connections[DEFAULT_DB_ALIAS] = before


def median_s(call: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, got = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        got = call()
        times.append(time.perf_counter() - started)
    return statistics.median(times), got


def units(rack: int) -> tuple[int, ...]:
    return (1, 9, 17, 25, 33) if rack % 5 == 0 else (1, 9, 17, 25)


def inventory(alias: str, racks: int) -> tuple[int, list[Rack], list[Node]]:
    site = Site.objects.using(alias).create(slug="bench", name="Bench")
    hall = Hall.objects.using(alias).create(site=site, name="H")
    loops = CoolingLoop.objects.using(alias).bulk_create(
        CoolingLoop(site=site, name=f"CDU-{i + 1}", capacity_kw=300, liquid_class="W32")
        for i in range(-(-racks // RACKS_PER_LOOP))
    )
    made = Rack.objects.using(alias).bulk_create(
        Rack(hall=hall, name=f"R{r:04d}", cooling="direct_liquid", power_budget_kw=45,
             loop=loops[r // RACKS_PER_LOOP], position=r)
        for r in range(racks)
    )  # fmt: skip
    PowerFeed.objects.using(alias).bulk_create(
        PowerFeed(rack=rack, name=name, amperage=63 if r % 3 == 0 else 80)
        for r, rack in enumerate(made)
        for name in ("A", "B")
    )
    nodes = Node.objects.using(alias).bulk_create(
        Node(name=f"b{r:04d}-{u:02d}", rack=rack, position=u, model=MODEL)
        for r, rack in enumerate(made)
        for u in units(r)
    )
    GPU.objects.using(alias).bulk_create(
        (GPU(node=n, index=k, model="H200", uuid=f"GPU-{n.pk}-{k}",
             reported_power_limit_max_w=700) for n in nodes for k in range(GPUS_PER_NODE)),
        batch_size=2000,
    )  # fmt: skip
    return site.pk, made, nodes


def rows(alias: str, racks: list[Rack], nodes: list[Node], now: int, days: int) -> None:
    """Hourly PDU, node-meter and GPU means over `days` before `now`: each rack's draw its
    nodes' sum, every value with a meter's noise (1 %)."""
    rng = random.Random(1)
    buckets = range(now - days * DAY, now, HOUR)
    by_rack: dict[int, list[Node]] = {}
    for node in nodes:
        by_rack.setdefault(node.rack_id, []).append(node)
    for chunk in range(0, len(racks), 50):  # 50 racks at a time: bounded memory
        rack_rows: list[tuple[Any, ...]] = []
        node_rows: list[tuple[Any, ...]] = []
        gpu_rows: list[tuple[Any, ...]] = []
        for rack in racks[chunk : chunk + 50]:
            for b in buckets:
                total = 0.0
                for node in by_rack[rack.pk]:
                    w = NODE_W * rng.uniform(0.7, 1.0)
                    total += w
                    node_rows.append((node.pk, b, 60, w))
                    gpu_rows.extend((node.pk, k, b, 60, w / 6, 60.0) for k in range(GPUS_PER_NODE))
                rack_rows.append((rack.pk, b, 60, total * rng.gauss(1.0, 0.01)))
        insert(alias, "fw_rack_1h", ("rack_id", "bucket", "n", "power_w_mean"), rack_rows)
        insert(alias, "fw_node_1h", ("node_id", "bucket", "n", "power_w_mean"), node_rows)
        insert(
            alias,
            "fw_gpu_1h",
            ("node_id", "gpu", "bucket", "n", "power_w_mean", "util_gpu_pct_mean"),
            gpu_rows,
        )


def run(kind: str, racks: int, days: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="fw-headroom-") as tmp:
        alias, pg_name = make_database(kind, Path(tmp))
        try:
            now = int(time.time()) // HOUR * HOUR
            seeded = time.perf_counter()
            site, made, nodes = inventory(alias, racks)
            rows(alias, made, nodes, now, days)
            with connections[alias].cursor() as cur:
                cur.execute("ANALYZE")  # as autovacuum would have, after a bulk load
            print(f"db={kind} seeded in {time.perf_counter() - seeded:.1f} s", flush=True)
            with as_default(alias):
                admin = User.objects.create_superuser("bench", password="x")
                request = RequestFactory().get("/capacity/headroom/", {"site": site})
                request.user = admin

                def page() -> int:
                    response = headroom_view(request)
                    assert response.status_code == 200, response.status_code
                    return response.content.count(b"<tr data-rack=")

                headroom_s, shown = median_s(page, repeat)
                capacity = RequestFactory().get("/capacity/", {"site": site})
                capacity.user = admin
                capacity_s, _ = median_s(lambda: capacity_view(capacity), repeat)
                with CaptureQueriesContext(connections[alias]) as seen:
                    page()
                parts = {
                    "site_capacity_s": lambda: site_capacity(site, float(now)),
                    "model_p95_s": lambda: measured_server_ws(site, float(now)),
                    "site_room_s": lambda: site_room(site, float(now)),
                }
                for name, part in parts.items():
                    print(f"db={kind} {name}={median_s(part, 1)[0]:.3f}", flush=True)
                answer_s, answer = median_s(
                    lambda: can_take(made[0].pk, 1, MODEL, float(time.time())), repeat
                )
            gpus = len(nodes) * GPUS_PER_NODE
            print(
                f"db={kind} racks={shown} gpus={gpus} headroom_s={headroom_s:.3f}"
                f" can_take_s={answer_s:.3f} capacity_page_s={capacity_s:.3f}"
                f" statements={len(seen.captured_queries)}"
                f" first_answer={answer.as_json()['answer']}",
                flush=True,
            )
        finally:
            connections[alias].close()
            if pg_name is not None:
                services.drop_database(services.services_database_url(), pg_name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--racks", type=int, default=500)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    if not args.no_sqlite:
        run("sqlite", args.racks, args.days, args.repeat)
    if os.environ.get("DATABASE_URL"):
        run("postgresql", args.racks, args.days, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
