"""Latest-state benchmark: `.venv/bin/python bench/latest_state.py [--db sqlite|postgres]`.

Measures, for 10,000 GPUs (1,250 nodes × 8) with samples shaped like the agent's
(the fast fields every tick, a throttle counter and energy on the slow lane):
  - the cost of merging the latest state per entity (`fleet.storage.latest.merge_latest`,
    the per-field newest-wins upsert), first insert and steady update;
  - the ingest child's memory for latest state: the old design (a fleet-wide copy of
    every entity's merged sample, loaded at start) against the new one (only what
    changed since the last save, `LatestDelta`), measured with tracemalloc.
Prints a table and, last, one `key=value` line.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

use_bench_settings()

from fleet.storage.db import Database, open_db  # noqa: E402
from fleet.storage.latest import LatestDelta, merge_latest  # noqa: E402
from tests.support import services  # noqa: E402
from tests.support.server import FleetServer  # noqa: E402

NODES, GPUS = 1250, 8
FAST = {
    "util_gpu_pct": 97.0,
    "util_mem_pct": 40.0,
    "mem_used_mib": 120_000.0,
    "mem_total_mib": 143_771.0,
    "temp_gpu_c": 61.0,
    "temp_mem_c": 70.0,
    "temp_margin_c": 22.0,
    "power_w": 689.5,
    "power_instant_w": 701.0,
    "power_limit_w": 700.0,
    "clock_sm_mhz": 1980.0,
    "clock_mem_mhz": 2619.0,
    "pstate": 0,
    "clock_event_reasons": 4,
    "nvlink_up": 18,
    "fan_pct": 0.0,
    "pcie_tx_kib_s": 100.0,
    "pcie_rx_kib_s": 100.0,
    "ecc_sbe_vol_total": 0,
}


def samples(
    tick: int, t0: float, staggered: bool = False
) -> list[tuple[tuple[int, int], dict[str, Any]]]:
    """Every GPU's sample of one tick. `staggered`: each node's slow lanes fall on ticks of
    their own (agents started at different times), so one save holds several shapes."""
    out = []
    for node in range(1, NODES + 1):
        lane = tick + node if staggered else tick
        for gpu in range(GPUS):
            s: dict[str, Any] = {"ts": t0 + tick, "gpu": gpu, **FAST}
            s["temp_gpu_c"] = 55.0 + (node + gpu + tick) % 20
            if lane % 10 == 0:
                s["violation_power_ns"] = 10_000 * tick
            if lane % 30 == 0:
                s["energy_j"] = 1_000_000.0 + tick
            out.append(((node, gpu), s))
    return out


def delta_for(items: list[tuple[tuple[int, int], dict[str, Any]]], now: float) -> LatestDelta:
    delta = LatestDelta()
    for key, sample in items:
        delta.add("gpu", key, sample, now)
    return delta


def merge_us_per_entity(db: Database, delta: LatestDelta) -> float:
    started = time.perf_counter()
    db.transaction(lambda tx: merge_latest(tx, delta))
    return 1e6 * (time.perf_counter() - started) / len(delta)


def allocated(build: Any) -> tuple[float, Any]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held = build()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / 2**20, held


def open_database(kind: str, workdir: Path) -> tuple[Database, str | None]:
    if kind == "sqlite":
        server = FleetServer(workdir)
        server.prepare()
        db_file = workdir / "fleetwatch.sqlite3"
        return open_db({"ENGINE": "django.db.backends.sqlite3", "NAME": str(db_file)}), None
    name = f"fwbench_{uuid.uuid4().hex[:8]}"
    url = services.create_database(services.services_database_url(), name)
    server = FleetServer(workdir, database_url=url)
    server.prepare()
    from fleetwatch.env import database_from_url

    return open_db(database_from_url(url)), name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--served", type=int, default=1600, help="GPUs one child serves")
    args = parser.parse_args()
    t0 = time.time() - 3600
    with tempfile.TemporaryDirectory() as tmp:
        db, pg_name = open_database(args.db, Path(tmp))
        try:
            first = merge_us_per_entity(db, delta_for(samples(0, t0), t0))
            steady = [merge_us_per_entity(db, delta_for(samples(t, t0), t0 + t)) for t in (1, 2, 3)]
            slow_tick = merge_us_per_entity(db, delta_for(samples(30, t0), t0 + 30))
            staggered = sorted(
                merge_us_per_entity(db, delta_for(samples(t, t0, True), t0 + t))
                for t in (31, 32, 33)
            )[1]
        finally:
            db.close()
            if pg_name:
                services.drop_database(services.services_database_url(), pg_name)
    # Each figure counts the samples it keeps alive (built inside the measurement).
    old_mb, _ = allocated(lambda: {k: dict(s) for k, s in samples(30, t0)})  # fleet-wide copy
    new_all_mb, _ = allocated(lambda: delta_for(samples(30, t0), t0 + 30))
    new_served_mb, _ = allocated(lambda: delta_for(samples(30, t0)[: args.served], t0 + 30))
    steady_us = sorted(steady)[1]
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"store: {args.db}; {NODES * GPUS} GPUs")
    print(f"merge, first insert          {first:8.1f} us/entity")
    print(f"merge, steady (median of 3)  {steady_us:8.1f} us/entity")
    print(f"merge, slow-lane tick        {slow_tick:8.1f} us/entity")
    print(f"merge, staggered slow lanes  {staggered:8.1f} us/entity (median of 3)")
    print(f"memory, fleet-wide copy (old)          {old_mb:6.1f} MiB for {NODES * GPUS} GPUs")
    print(f"memory, delta of every GPU (new, max)  {new_all_mb:6.1f} MiB")
    print(f"memory, delta of {args.served} served GPUs (new)  {new_served_mb:6.1f} MiB")
    print(
        f"db={args.db} gpus={NODES * GPUS} merge_us_per_entity={steady_us:.1f}"
        f" first_insert_us_per_entity={first:.1f} staggered_us_per_entity={staggered:.1f}"
        f" old_mib={old_mb:.1f}"
        f" delta_all_mib={new_all_mb:.1f} delta_served_mib={new_served_mb:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
