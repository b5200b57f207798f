"""Energy-ledger benchmark: `.venv/bin/python bench/ledger.py [--gpus N] [--days D] [--tier T]`.

Synthetic rollup rows for N GPUs (8 per node, 8 nodes per rack, one job per node) over D days
ending at an hour: most GPUs train, some hold an allocation that runs nothing, some serve
bursty inference, some are unallocated, a few hang or are lost; every node draws 800 W
besides its GPUs; the facility meter reads 1.4 × the nodes' power. The last 30 minutes also
have 1-minute rows, which the page's reclaim list ("idle now") reads.

Timed:
- `ledger()`: the whole ledger computed from the tier (per GPU, per job, reconciliation), once;
- `keep`: the stored ledger built from the tier (fleet/read/ledger_store.py; on a live site
  the `fleet.ledger` task does this an hour at a time, here every hour of the window at once);
- the efficiency page's queries (`fleet.read.efficiency.site_efficiency`: the stored ledger
  of the window, places, teams, jobs, the reclaim list), median of `--repeat`.

The tier: minutes while the 1-minute tier holds the window (72 h by default), else hours,
where states are decided per hour (docs/ledger.md). 10,000 GPUs × 30 days is 7.2 M hour
rows. SQLite always; PostgreSQL too when DATABASE_URL is set. Last line per database:
`db=… tier=… gpus=… days=… ledger_query_s=… reconcile_error_pct=…` (`ledger_query_s`: the
page's queries).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

use_bench_settings()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleetwatch.settings")

import django  # noqa: E402

django.setup()

from django.db import connections, transaction  # noqa: E402

from fleet.models import Site  # noqa: E402
from fleet.read.efficiency import site_efficiency  # noqa: E402
from fleet.read.ledger import ledger  # noqa: E402
from fleet.read.ledger_sql import Window  # noqa: E402
from fleet.storage.ledger import keep  # noqa: E402
from fleet.storage.schema import TIER_SECONDS  # noqa: E402
from fleetwatch.env import database_from_url, sqlite_database  # noqa: E402
from tests.support import services  # noqa: E402
from tests.support.databases import register_alias  # noqa: E402
from tests.support.ledger_seed import rolled_up_to  # noqa: E402
from tests.support.server import FleetServer  # noqa: E402

GPUS_PER_NODE = 8
NODES_PER_RACK = 8
RECENT_MINUTES = 30  # 1-minute rows before the window's end: the reclaim list's "now"
NODE_OTHER_W = 800.0
PUE = 1.4
LIMIT_W = 700.0


def use(gpu: int, i: int) -> tuple[float | None, float | None, float | None, float]:
    """(util mean, util max, power W, memory MiB) of GPU `gpu` in bucket `i`."""
    case = gpu % 20
    if case == 0:
        return 0.0, 0.0, 70.0, 0.5  # allocated, runs nothing
    if case in (1, 2):
        return (12.0, 70.0, 250.0, 2e4) if i % 4 == 0 else (0.0, 0.0, 80.0, 2e4)  # inference
    if case in (3, 4, 5):
        return 0.0, 0.0, 60.0, 0.5  # unallocated
    if case == 6 and gpu % 40 == 6:
        return 100.0, 100.0, 150.0, 7e4  # a hung collective
    if case == 7 and gpu % 60 == 7:
        return None, None, None, 0.0  # lost
    return 95.0, 100.0, 600.0, 6e4  # training


def allocated(gpu: int) -> bool:
    return gpu % 20 not in (3, 4, 5)


def make_database(kind: str, workdir: Path) -> tuple[str, str | None]:
    """A migrated database reachable as a Django alias; its alias and PostgreSQL name."""
    alias = f"bench_{uuid.uuid4().hex[:6]}"
    if kind == "sqlite":
        FleetServer(workdir).migrate()
        register_alias(alias, sqlite_database(str(workdir / "fleetwatch.sqlite3")))
        return alias, None
    name = f"fwbench_{uuid.uuid4().hex[:8]}"
    url = services.create_database(services.services_database_url(), name)
    FleetServer(workdir, database_url=url).migrate()
    register_alias(alias, database_from_url(url))
    return alias, name


def execute(alias: str, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
    with connections[alias].cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []


def insert(alias: str, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    conn = connections[alias]
    if conn.vendor == "postgresql":
        with (
            conn.cursor() as cur,
            cur.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)
        return
    # One transaction: in autocommit each row was a commit of its own (144 s for 737,280).
    marks = ", ".join(["?"] * len(columns))
    with transaction.atomic(using=alias), conn.cursor() as cur:
        cur.connection.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows
        )


def seed(alias: str, gpus: int, a: int, b: int, tier: str) -> int:
    """The inventory (racks of 8 nodes), a job per node, its intervals and the rows; the
    site's id."""
    execute(alias, "INSERT INTO fleet_site (slug, name, timezone, currency, grid_gco2_per_kwh,"
            " tariff_per_kwh) VALUES ('bench', 'Bench', 'UTC', 'EUR', 300, 0.2)")  # fmt: skip
    site = execute(alias, "SELECT id FROM fleet_site WHERE slug = 'bench'")[0][0]
    execute(alias, "INSERT INTO fleet_hall (site_id, name) VALUES (%s, 'H')", [site])
    hall = execute(alias, "SELECT id FROM fleet_hall WHERE site_id = %s", [site])[0][0]
    nodes = gpus // GPUS_PER_NODE
    racks = -(-nodes // NODES_PER_RACK)
    insert(alias, "fleet_rack", ("hall_id", "name", "cooling", "power_budget_kw", "position"),
           [(hall, f"R{r:04d}", "liquid", 80, r) for r in range(racks)])  # fmt: skip
    rack_ids = [r[0] for r in execute(alias, "SELECT id FROM fleet_rack ORDER BY name")]
    insert(alias, "fleet_node", ("name", "rack_id", "position", "model", "info"),
           [(f"b{i:05d}", rack_ids[i // NODES_PER_RACK], i % NODES_PER_RACK, "", "{}")
            for i in range(nodes)])  # fmt: skip
    ids = [r[0] for r in execute(alias, "SELECT id FROM fleet_node ORDER BY name")]
    insert(alias, "fleet_workload", ("site_id", "kind", "key", "namespace", "pod", "pod_uid",
           "container", "container_id", "job", "step", "\"user\"", "account", "first_seen"),
           [(site, "slurm", f"j{n}", "", "", "", "", "", f"j{n}", "", "ana",
             f"team{n % 12}", a) for n in range(nodes)])  # fmt: skip
    jobs = dict(execute(alias, "SELECT key, id FROM fleet_workload"))
    insert(alias, "fleet_gpuallocation", ("site_id", "node_id", "gpu", "mig", "workload_id",
           "source", "started", "last_seen", "ended"),
           [(site, ids[g // GPUS_PER_NODE], g % GPUS_PER_NODE, "", jobs[f"j{g // GPUS_PER_NODE}"],
             "scheduler", a - 3600, b, None) for g in range(gpus) if allocated(g)])  # fmt: skip
    series(alias, site, ids, tier, a, b)
    if tier == "1h":
        series(alias, site, ids, "1m", b - 60 * RECENT_MINUTES, b)
    for table in ("fw_gpu_1h", "fw_node_1h", "fw_gpu_1m", "fw_node_1m", "fleet_gpuallocation"):
        execute(alias, f"ANALYZE {table}")
    return int(site)


def series(alias: str, site: int, ids: list[int], tier: str, a: int, b: int) -> None:
    """GPU, node and facility rows of `tier` over [a, b)."""
    step = TIER_SECONDS[tier]
    buckets = range((b - a) // step)
    for start in range(0, len(ids), 50):  # 400 GPUs at a time: bounded memory
        gpu_rows, node_rows = [], []
        for n in range(start, min(start + 50, len(ids))):
            energy = [1e6] * GPUS_PER_NODE
            for i in buckets:
                watts = NODE_OTHER_W
                for k in range(GPUS_PER_NODE):
                    g = n * GPUS_PER_NODE + k
                    util, util_max, power, mem = use(g, i)
                    energy[k] += (power or 0.0) * step
                    e = None if power is None else energy[k]
                    gpu_rows.append((ids[n], k, a + i * step, 60, util, util_max, power, LIMIT_W,
                                     mem, e))  # fmt: skip
                    watts += power or 0.0
                node_rows.append((ids[n], a + i * step, 60, watts))
        insert(alias, f"fw_gpu_{tier}", ("node_id", "gpu", "bucket", "n", "util_gpu_pct_mean",
               "util_gpu_pct_max", "power_w_mean", "power_limit_w_mean", "mem_used_mib_max",
               "energy_j_last"), gpu_rows)  # fmt: skip
        insert(alias, f"fw_node_{tier}", ("node_id", "bucket", "n", "power_w_mean"), node_rows)
    it = execute(alias, f"SELECT bucket, SUM(power_w_mean) FROM fw_node_{tier}"
                 " WHERE bucket >= %s AND bucket < %s GROUP BY bucket", [a, b])  # fmt: skip
    insert(alias, f"fw_facility_{tier}", ("site_id", "bucket", "n", "total_power_w_mean",
           "it_power_w_mean"), [(site, bk, 60, w * PUE, w) for bk, w in it])  # fmt: skip


@dataclass(frozen=True)
class Figures:
    ledger_s: float  # ledger() from the tier, once
    keep_s: float  # the store built
    page_s: float  # the efficiency page's queries, median
    reconcile_error_pct: float | None


def run(
    kind: str, gpus: int, days: float, tier: str, repeat: int, computed: bool = True
) -> Figures:
    step = TIER_SECONDS[tier]
    b = int(time.time()) // 3600 * 3600
    a = b - int(days * 86400) // step * step
    with tempfile.TemporaryDirectory() as tmp:
        alias, pg_name = make_database(kind, Path(tmp))
        try:
            t0 = time.perf_counter()
            site_id = seed(alias, gpus, a, b, tier)
            seeded = time.perf_counter() - t0
            window = Window(site_id, a, b, tier)
            t1 = time.perf_counter()
            led = ledger(window, using=alias) if computed else None
            whole = time.perf_counter() - t1
            # The rollups past the window; "now" a little later, or days later for an hourly
            # window (so every hour is closed from the hourly tier, as a backfill does).
            rolled_up_to(alias, minutes=b + 600, hours=b)
            now = b + 60.0 if tier == "1m" else b + 4 * 86400.0
            t2 = time.perf_counter()
            keep(now, using=alias, budget_s=3600.0)
            kept = time.perf_counter() - t2
            # the seeded minutes end where the hours do: nothing is open after them
            execute(alias, "UPDATE fw_ledger_state SET open_until = closed_until")
            site = Site.objects.using(alias).get(pk=site_id)
            times = []
            for _ in range(repeat):
                t3 = time.perf_counter()
                page = site_efficiency(site, b - a, b + 30.0, using=alias)
                times.append(time.perf_counter() - t3)
        finally:
            connections[alias].close()
            if pg_name:
                services.drop_database(services.services_database_url(), pg_name)
    rows = gpus * (b - a) // step
    print(f"db={kind}: {gpus} GPUs × {days:g} days, tier {tier}: {rows:,} GPU rows"
          f" (seeded in {seeded:.1f} s)")  # fmt: skip
    for state, line in sorted(page.ledger.states.items()):
        print(f"  {state:18} {line.gpu_hours:12,.0f} GPU-h {line.energy.total_kwh:14,.1f} kWh")
    print(f"  racks {len(page.racks)}, teams {len(page.teams)}, jobs {len(page.jobs)},"
          f" reclaim list {len(page.reclaim)}")  # fmt: skip
    said = f"{whole:.2f} s" if led is not None else "not run (--skip-computed)"
    print(f"ledger() from the tier: {said}; the store built (keep): {kept:.2f} s")
    error = page.ledger.reconcile_error_pct
    print(f"reconcile_error_pct: stored {error}, computed {led and led.reconcile_error_pct}")
    print(
        f"db={kind} tier={tier} gpus={gpus} days={days:g}"
        f" ledger_query_s={statistics.median(times):.3f}"
        f" reconcile_error_pct={'n/a' if error is None else f'{error:.3f}'}"
    )
    return Figures(whole, kept, statistics.median(times), error)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--tier", choices=("1m", "1h"), default=None,
                        help="default: 1m up to 3 days, else 1h")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument(
        "--skip-computed", action="store_true", help="leave out ledger() from the tier"
    )
    args = parser.parse_args()
    tier = args.tier or ("1m" if args.days <= 3 else "1h")
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    if not args.no_sqlite:
        run("sqlite", args.gpus, args.days, tier, args.repeat, not args.skip_computed)
    if os.environ.get("DATABASE_URL"):
        run("postgresql", args.gpus, args.days, tier, args.repeat, not args.skip_computed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
