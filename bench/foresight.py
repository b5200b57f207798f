"""Time-to-limit benchmark: `.venv/bin/python bench/foresight.py [--gpus N] [--repeat R]`.

A site of N GPUs (4 per node, 5 nodes per rack: 500 racks at 10,000 GPUs; two feeds per
rack, one CDU per 10 racks) with the rollup rows the forecasts read (docs/forecast.md): the
last 3 hours of 1-minute means and the 7 days before them of hourly means, for every GPU
(power and temperature), node, rack PDU, feed and CDU. Every fourth rack and its feeds,
every fourth CDU's supply and one GPU in 25 ramp linearly over the recent 3 hours towards
their limits (steady before); the rest hold steady. Every power and coolant value carries a
meter's noise (1 %), every GPU temperature a whole-degree reading's (`TEMP_SD_C`). The
feeds of every eighth rack are 16 A (9.2 kW each: the feeds reach their rating), the
others' 32 A (18.4 kW: the two together reach their N+1, one feed's rating); GPUs slow down
at 87 °C, so their forecast limit is 84 °C.

Timed, median of `--repeat`: `site_forecasts` (fleet/read/forecast_sources.py), the
forecast of every rack, feed, feed pair (N+1), CDU and GPU of the site from the rollups, what the
`fleet.forecasts` task computes once a minute (fleet/read/forecast_now.py); and
`site_records` (fleet/read/health_record.py), every GPU's health record, what the health
page reads, with the GPUs' health hours as the hourly rollup leaves them an hour behind
(`health_hour_write_s`: what writing one hour of them adds to the rollup). `ttl_error_pct`:
the worst error of a ramping subject's forecast crossing against its ramp's true crossing,
as a % of the true time to limit (per subject kind: the median, 90th percentile and worst,
and how many true crossings fell inside the forecast's 90 % interval).
SQLite always; PostgreSQL too when DATABASE_URL is set. Last line per database:
`db=… gpus=… racks=… forecast_pass_s=… health_pass_s=… ttl_error_pct=…`.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from django.db import DEFAULT_DB_ALIAS, connections, transaction  # noqa: E402

from bench.ledger import execute, insert, make_database  # noqa: E402  (sets Django up)
from fleet.models import GPU, CoolingLoop, Hall, Node, PowerFeed, Rack, Site  # noqa: E402
from fleet.read.forecast import PARAMS, Forecast  # noqa: E402
from fleet.read.forecast_sources import LimitForecast, site_forecasts  # noqa: E402
from fleet.read.health_record import site_records  # noqa: E402
from fleet.storage import health_hours  # noqa: E402
from tests.support import services  # noqa: E402

GPUS_PER_NODE, NODES_PER_RACK, RACKS_PER_LOOP = 4, 5, 10
GPU_W, NODE_OTHER_W = 700.0, 800.0
GPU_COLUMNS = ("node_id", "gpu", "bucket", "n", "power_w_mean", "temp_gpu_c_mean")
BUDGET_KW = 20.0
FEED_AMPS_LOW, FEED_AMPS = 16, 32  # a feed: 415 V × 16 A × 80 % × √3 = 9.2 kW; 32 A: 18.4 kW
SLOWDOWN_C = 87.0  # every GPU's (reported) slowdown limit
MINUTE, HOUR, DAY = 60, 3600, 86_400
# (base at `now`, rise per hour) of each ramping kind; every fourth subject ramps.
RACK_KW, FEED_KW, SUPPLY_C, HEAT_KW = (17.5, 2.5), (8.75, 1.25), (30.0, 1.5), (700.0, 0.0)
FEEDS_KW = (2 * FEED_KW[0], 2 * FEED_KW[1])  # a rack's two feeds together
GPU_C, GPU_FLAT_C = (82.0, 1.5), 65.0  # a ramping GPU: 84 °C 80 minutes from now
# A temperature's noise is absolute (1 % of a Celsius value means nothing: °C has no true
# zero): one whole-degree NVML reading's rounding error, 1/√12 °C — as if each minute mean
# were a single reading; a minute of readings averages much of it away.
TEMP_SD_C = 12**-0.5


def ramps(index: int) -> bool:
    return index % 4 == 0


def gpu_ramps(node_id: int, gpu: int) -> bool:
    return (node_id * GPUS_PER_NODE + gpu) % 25 == 0


def feed_amps(rack_index: int) -> int:
    return FEED_AMPS_LOW if rack_index % 8 == 0 else FEED_AMPS


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
    made = Node.objects.using(alias).bulk_create(
        Node(name=f"b{i:05d}", rack=racks[i // NODES_PER_RACK], position=i % NODES_PER_RACK)
        for i in range(nodes)
    )
    GPU.objects.using(alias).bulk_create(
        (GPU(node=n, index=k, model="H100", uuid=f"GPU-{n.pk}-{k}",
             reported_slowdown_c=SLOWDOWN_C) for n in made for k in range(GPUS_PER_NODE)),
        batch_size=2000,
    )  # fmt: skip
    feeds = PowerFeed.objects.using(alias).bulk_create(
        PowerFeed(rack=rack, name=name, amperage=feed_amps(r))
        for r, rack in enumerate(racks)
        for name in ("A", "B")
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

        def kw(
            index: int, t: float, ramp: tuple[float, float], rising: bool | None = None
        ) -> float:
            base, per_h = ramp
            rising = ramps(index) if rising is None else rising
            rise = per_h * (max(t, recent) - now) / HOUR if rising else 0.0
            return base + rise + rng.gauss(0, 0.01 * base)

        def temp(node_id: int, k: int, centre: float) -> float:
            base, per_h = GPU_C if gpu_ramps(node_id, k) else (GPU_FLAT_C, 0.0)
            return base + per_h * (max(centre, recent) - now) / HOUR + rng.gauss(0, TEMP_SD_C)

        gpu_rows: list[tuple[Any, ...]] = []
        node_rows: list[tuple[Any, ...]] = []
        for node_id in node_ids:
            for t in buckets:
                node_rows.append((node_id, t, 6, NODE_OTHER_W + GPUS_PER_NODE * GPU_W))
                gpu_rows.extend((node_id, k, t, 6, GPU_W, temp(node_id, k, t + step / 2))
                                for k in range(GPUS_PER_NODE))  # fmt: skip
            if len(gpu_rows) > 400_000:
                insert(alias, f"fw_gpu_{tier}", GPU_COLUMNS, gpu_rows)
                gpu_rows = []
        insert(alias, f"fw_gpu_{tier}", GPU_COLUMNS, gpu_rows)
        insert(alias, f"fw_node_{tier}", ("node_id", "bucket", "n", "power_w_mean"), node_rows)
        insert(alias, f"fw_rack_{tier}", ("rack_id", "bucket", "n", "power_w_mean"),
               [(r.pk, t, 6, 1e3 * kw(i, t + step / 2, RACK_KW))
                for i, r in enumerate(racks) for t in buckets])  # fmt: skip
        insert(alias, f"fw_feed_{tier}", ("feed_id", "bucket", "n", "power_w_mean"),
               [(f.pk, t, 6, 1e3 * kw(i // 2, t + step / 2, FEED_KW))
                for i, f in enumerate(feeds) for t in buckets])  # fmt: skip
        insert(alias, f"fw_loop_{tier}",
               ("loop_id", "bucket", "n", "supply_c_mean", "heat_removed_kw_mean"),
               [(lp.pk, t, 6, kw(i, t + step / 2, SUPPLY_C), kw(i + 1, t + step / 2, HEAT_KW))
                for i, lp in enumerate(loops) for t in buckets])  # fmt: skip
    for table in ("fw_gpu_1m", "fw_node_1m", "fw_rack_1m", "fw_feed_1m", "fw_loop_1m",
                  "fw_gpu_1h", "fw_node_1h", "fw_rack_1h", "fw_feed_1h", "fw_loop_1h"):  # fmt: skip
        execute(alias, f"ANALYZE {table}")


@dataclass
class Errors:
    """One subject's ramps: how many reach their limit within the horizon, each forecast's
    |forecast crossing − true crossing| as a % of the true time to limit, and how many of
    the true crossings fell inside the forecast's 90 % interval."""

    ramping: int = 0
    errors: list[float] = field(default_factory=list)
    covered: int = 0

    def pct(self, q: float) -> float:
        ranked = sorted(self.errors)
        return ranked[min(len(ranked) - 1, int(q * len(ranked)))] if ranked else 0.0


def ttl_errors(got: list[LimitForecast], racks: list[Rack], feeds: list[PowerFeed],
               loops: list[CoolingLoop], now: float) -> dict[str, Errors]:  # fmt: skip
    """Per subject, the ramping subjects' forecast errors. GPUs: only those the screen
    passed appear in `got`, so every ramping GPU is counted from the inventory."""
    index = {("rack", r.pk): (i, RACK_KW) for i, r in enumerate(racks)}
    index |= {("feed", f.pk): (i // 2, FEED_KW) for i, f in enumerate(feeds)}
    index |= {("feed_n1", r.pk): (i, FEEDS_KW) for i, r in enumerate(racks)}
    index |= {("loop_supply", lp.pk): (i, SUPPLY_C) for i, lp in enumerate(loops)}
    gpus = GPU.objects.using(racks[0]._state.db).values_list("pk", "node_id", "index")
    index |= {("gpu", pk): (0 if gpu_ramps(n, k) else 1, GPU_C) for pk, n, k in gpus}
    out: dict[str, Errors] = {}
    horizon = PARAMS.horizon_fraction * PARAMS.recent_s
    out["gpu"] = Errors(ramping=sum(1 for _, n, k in gpus if gpu_ramps(n, k)))
    for item in got:
        i, (base, per_h) = index.get((item.subject, item.entity_id), (1, (0.0, 0.0)))
        if not ramps(i) or per_h <= 0 or item.limit <= base:
            continue
        true_in = (item.limit - base) / per_h * HOUR
        if true_in > horizon:
            continue  # beyond what the method forecasts
        errors = out.setdefault(item.subject, Errors())
        if item.subject != "gpu":
            errors.ramping += 1
        forecast = item.forecast
        if isinstance(forecast, Forecast):
            errors.errors.append(100 * abs(forecast.crossing_at - now - true_in) / true_in)
            errors.covered += forecast.earliest <= now + true_in <= forecast.latest
    return out


@contextmanager
def as_default(alias: str) -> Iterator[None]:
    """The bench database as Django's default: the health record reads the default."""
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


def health_hours_as_rolled_up(alias: str, now: int) -> float:
    """The GPUs' health hours (fleet/storage/health_hours.py) as the hourly rollup leaves
    them an hour behind `now` — the most the health record then reads from the 1-minute
    tier, a whole hour — and the seconds the rollup's own write of one hour took (what
    keeping them adds to each hourly chunk)."""
    behind = now - HOUR
    with transaction.atomic(using=alias), connections[alias].cursor() as cur:
        health_hours.write_hours(cur, now - int(PARAMS.recent_s) - 8 * DAY, behind - HOUR)
        started = time.perf_counter()
        health_hours.write_hours(cur, behind - HOUR, behind)
        took = time.perf_counter() - started
        cur.execute("DELETE FROM fw_rollup_state WHERE tier = '1h' AND kind = 'gpu'")
        cur.execute(
            "INSERT INTO fw_rollup_state (tier, kind, done_until, sealed_until)"
            " VALUES ('1h', 'gpu', %s, %s)",
            [behind, behind],
        )
    return took


def run(kind: str, gpus: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="fw-foresight-") as tmp:
        alias, pg_name = make_database(kind, Path(tmp))
        try:
            now = int(time.time()) // HOUR * HOUR
            seeded = time.perf_counter()
            site, racks, feeds, loops = inventory(alias, gpus)
            rows(alias, racks, feeds, loops, now)
            print(f"db={kind} seeded in {time.perf_counter() - seeded:.1f} s", flush=True)
            forecast_s, got = median_s(
                lambda: site_forecasts(site, float(now), using=alias), repeat
            )
            hour_write_s = health_hours_as_rolled_up(alias, now)
            with as_default(alias):
                health_s, records = median_s(lambda: site_records(site, float(now)), repeat)
            errors = ttl_errors(got, racks, feeds, loops, float(now))
            for subject, e in sorted(errors.items()):
                print(
                    f"db={kind} {subject}: forecast {len(e.errors)}/{e.ramping} error_pct"
                    f" p50={e.pct(0.5):.1f} p90={e.pct(0.9):.1f} worst={e.pct(1.0):.1f}"
                    f" true_in_interval={e.covered}/{len(e.errors)}",
                    flush=True,
                )
            worst = max((e.pct(1.0) for e in errors.values()), default=0.0)
            print(f"db={kind} subjects={len(got)} health_records={len(records)}", flush=True)
            print(f"db={kind} health_hour_write_s={hour_write_s:.3f}", flush=True)
            print(
                f"db={kind} gpus={gpus} racks={len(racks)} forecast_pass_s={forecast_s:.3f}"
                f" health_pass_s={health_s:.3f} ttl_error_pct={worst:.1f}",
                flush=True,
            )
        finally:
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
