"""Time-to-limit benchmark: `.venv/bin/python bench/foresight.py [--gpus N] [--repeat R]`.

A site of N GPUs (8 per node, 8 nodes per rack, two feeds per rack, one CDU per 10 racks)
with the rollup rows the forecasts read (docs/forecast.md): the last 3 hours of 1-minute
means and the 7 days before them of hourly means, for every GPU, node, rack PDU, feed and
CDU. Every fourth rack and its feeds ramp towards their limits, every fourth CDU's supply
climbs; the rest hold steady with a meter's noise.

Timed: `site_forecasts` (fleet/read/forecast_sources.py), the forecast of every rack,
feed and CDU of the site from the rollups, median of `--repeat`; it is what
the `fleet.forecasts` task computes once a minute (fleet/read/forecast_now.py) for the pages
and the rules to read.
SQLite always; PostgreSQL too when DATABASE_URL is set. Last line per database:
`db=… gpus=… racks=… feeds=… loops=… forecasts=… forecast_s=…`.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ledger import execute, insert, make_database  # noqa: E402  (sets Django up)
from fleet.models import CoolingLoop, Hall, Node, PowerFeed, Rack, Site  # noqa: E402
from fleet.read.forecast import PARAMS, Forecast  # noqa: E402
from fleet.read.forecast_sources import site_forecasts  # noqa: E402
from tests.support import services  # noqa: E402

GPUS_PER_NODE, NODES_PER_RACK, RACKS_PER_LOOP = 8, 8, 10
BUDGET_KW, GPU_W, NODE_OTHER_W = 80.0, 700.0, 800.0
MINUTE, HOUR, DAY = 60, 3600, 86_400


def inventory(alias: str, gpus: int) -> tuple[int, list[Rack], list[PowerFeed], list[CoolingLoop]]:
    site = Site.objects.using(alias).create(slug="bench", name="Bench")
    hall = Hall.objects.using(alias).create(site=site, name="H")
    nodes = gpus // GPUS_PER_NODE
    count = -(-nodes // NODES_PER_RACK)
    loops = CoolingLoop.objects.using(alias).bulk_create(
        CoolingLoop(site=site, name=f"CDU-{i + 1}", capacity_kw=1000, liquid_class="W32")
        for i in range(-(-count // RACKS_PER_LOOP))
    )
    racks = Rack.objects.using(alias).bulk_create(
        Rack(
            hall=hall,
            name=f"R{r:04d}",
            cooling="liquid",
            power_budget_kw=BUDGET_KW,
            loop=loops[r // RACKS_PER_LOOP],
            position=r,
        )
        for r in range(count)
    )
    Node.objects.using(alias).bulk_create(
        Node(name=f"b{i:05d}", rack=racks[i // NODES_PER_RACK], position=i % NODES_PER_RACK)
        for i in range(nodes)
    )
    feeds = PowerFeed.objects.using(alias).bulk_create(
        PowerFeed(rack=rack, name=name, amperage=63) for rack in racks for name in ("A", "B")
    )
    return site.pk, racks, feeds, loops


def rows(alias: str, racks: list[Rack], feeds: list[PowerFeed], loops: list[CoolingLoop],
         now: int) -> None:  # fmt: skip
    """Hourly means for the pattern's days, then minute means for the recent window."""
    rng = random.Random(1)
    recent = now - int(PARAMS.recent_s)
    node_ids = dict(execute(alias, "SELECT id, rack_id FROM fleet_node"))
    for tier, step, a, b in (("1h", HOUR, recent - PARAMS.pattern_days * DAY, recent),
                             ("1m", MINUTE, recent, now)):  # fmt: skip
        buckets = range(a, b, step)

        def kw(index: int, t: float, base: float, per_h: float) -> float:
            rise = per_h * (t - now) / HOUR if index % 4 == 0 else 0.0
            return base + rise + rng.gauss(0, 0.01 * base)

        gpu_rows: list[tuple[Any, ...]] = []
        node_rows: list[tuple[Any, ...]] = []
        for node_id in node_ids:
            for t in buckets:
                node_rows.append((node_id, t, 6, NODE_OTHER_W + GPUS_PER_NODE * GPU_W))
                gpu_rows.extend((node_id, k, t, 6, GPU_W) for k in range(GPUS_PER_NODE))
            if len(gpu_rows) > 400_000:
                insert(alias, f"fw_gpu_{tier}", ("node_id", "gpu", "bucket", "n", "power_w_mean"),
                       gpu_rows)  # fmt: skip
                gpu_rows = []
        insert(alias, f"fw_gpu_{tier}", ("node_id", "gpu", "bucket", "n", "power_w_mean"),
               gpu_rows)  # fmt: skip
        insert(alias, f"fw_node_{tier}", ("node_id", "bucket", "n", "power_w_mean"), node_rows)
        # a ramping rack: 70 kW now, 10 kW/h (its 80 kW budget in an hour)
        insert(alias, f"fw_rack_{tier}", ("rack_id", "bucket", "n", "power_w_mean"),
               [(r.pk, t, 6, 1e3 * kw(i, t + step / 2, 70.0, 10.0))
                for i, r in enumerate(racks) for t in buckets])  # fmt: skip
        insert(alias, f"fw_feed_{tier}", ("feed_id", "bucket", "n", "power_w_mean"),
               [(f.pk, t, 6, 1e3 * kw(i // 2, t + step / 2, 35.0, 5.0))
                for i, f in enumerate(feeds) for t in buckets])  # fmt: skip
        insert(alias, f"fw_loop_{tier}",
               ("loop_id", "bucket", "n", "supply_c_mean", "heat_removed_kw_mean"),
               [(lp.pk, t, 6, kw(i, t + step / 2, 30.0, 1.5), kw(i + 1, t + step / 2, 700, 0))
                for i, lp in enumerate(loops) for t in buckets])  # fmt: skip
    for table in ("fw_gpu_1m", "fw_node_1m", "fw_rack_1m", "fw_feed_1m", "fw_loop_1m",
                  "fw_gpu_1h", "fw_node_1h", "fw_rack_1h", "fw_feed_1h", "fw_loop_1h"):  # fmt: skip
        execute(alias, f"ANALYZE {table}")


def run(kind: str, gpus: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="fw-foresight-") as tmp:
        alias, pg_name = make_database(kind, Path(tmp))
        try:
            now = int(time.time()) // HOUR * HOUR
            seeded = time.perf_counter()
            site, racks, feeds, loops = inventory(alias, gpus)
            rows(alias, racks, feeds, loops, now)
            print(f"db={kind} seeded in {time.perf_counter() - seeded:.1f} s", flush=True)
            times, got = [], []
            for _ in range(repeat):
                started = time.perf_counter()
                got = site_forecasts(site, float(now), using=alias)
                times.append(time.perf_counter() - started)
            made = sum(isinstance(f.forecast, Forecast) for f in got)
            print(
                f"db={kind} gpus={gpus} racks={len(racks)} feeds={len(feeds)} loops={len(loops)}"
                f" subjects={len(got)} forecasts={made} forecast_s={statistics.median(times):.3f}",
                flush=True,
            )
        finally:
            from django.db import connections

            connections[alias].close()
            if pg_name is not None:
                services.drop_database(services.services_database_url(), pg_name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    if not args.no_sqlite:
        run("sqlite", args.gpus, args.repeat)
    if os.environ.get("DATABASE_URL"):
        run("postgresql", args.gpus, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
