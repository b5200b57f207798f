"""Workload-interval benchmark: `.venv/bin/python bench/workloads_ingest.py`.

What storing who runs on each GPU costs the ingest writer (fleet/storage/workloads.py):
1,250 nodes × 8 GPUs each send a `workloads` snapshot every 10 s. Three nodes in four run
one Slurm job over their 8 GPUs (an allocation and a process per GPU), the fourth a pod
per GPU (allocation named by pod-resources, process by cgroup UID); one node in 30 starts
new jobs each round (opens and closes), the rest keep theirs (bumps). Snapshots go in
`--per-commit` at a time, as the writer commits them with the samples of the same round.

Timed: the resolver's work (wire entries → snapshots, Python) and the statements inside the
transaction, without its commit (the batch's samples pay for that one anyway); the commit
is shown beside. SQLite always; PostgreSQL too when DATABASE_URL is set. Last line per
database: `db=… nodes=… snapshots_per_s=… ms_per_snapshot=…`.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

use_bench_settings()

from fleet.storage.db import Database, Tx, open_db  # noqa: E402
from fleet.storage.dialect import json_param  # noqa: E402
from fleet.storage.workloads import Snapshot, snapshots_of, store_workloads  # noqa: E402
from tests.support import services  # noqa: E402
from tests.support.server import FleetServer  # noqa: E402

NODES, GPUS = 1250, 8
ROUND_S = 10.0
CHURN = 30  # one node in CHURN starts new jobs each round


def entries(node: int, rnd: int, ts: float) -> list[dict[str, Any]]:
    generation = (rnd + node) // CHURN
    out = []
    for gpu in range(GPUS):
        pid = 10_000 + 100 * generation + gpu
        if node % 4 == 0:
            name = f"infer-{node}-{gpu}-{generation}"
            allocation = {"kind": "pod", "namespace": "serving", "pod": name, "container": "main"}
            owner = {"kind": "pod", "pod_uid": f"uid-{name}", "container_id": f"c-{name}"}
        else:
            job = f"{node}{generation:05d}"
            allocation = {"kind": "slurm", "job": job, "user": "ana", "account": "physics"}
            owner = {**allocation, "step": "0"}
        process = {"pid": pid, "memory_mib": 60_000.0 + rnd, "sm_pct": 90.0, "owner": owner}
        out.append({"ts": ts, "gpu": gpu, "allocation": allocation, "processes": [process]})
    return out


def open_database(kind: str, workdir: Path) -> tuple[Database, str | None]:
    if kind == "sqlite":
        FleetServer(workdir).prepare()
        file = workdir / "fleetwatch.sqlite3"
        return open_db({"ENGINE": "django.db.backends.sqlite3", "NAME": str(file)}), None
    name = f"fwbench_{uuid.uuid4().hex[:8]}"
    url = services.create_database(services.services_database_url(), name)
    FleetServer(workdir, database_url=url).prepare()
    from fleetwatch.env import database_from_url

    return open_db(database_from_url(url)), name


def add_nodes(db: Database) -> tuple[list[int], int]:
    """The bench's node rows (workloads need no GPU rows); their ids and the site's."""
    rack_id, site_id = db.query(
        "SELECT r.id, h.site_id FROM fleet_rack r JOIN fleet_hall h ON h.id = r.hall_id"
        " ORDER BY r.id LIMIT 1"
    )[0]
    sql = (
        "INSERT INTO fleet_node (name, rack_id, position, model, info)"
        f" VALUES (%s, %s, 0, '', {json_param(db.vendor)})"
    )
    rows = [(f"wl-bench-{i:04d}", rack_id, "{}") for i in range(NODES)]
    db.transaction(lambda tx: tx.execute_many(sql, rows))
    found = db.query("SELECT id FROM fleet_node WHERE name LIKE 'wl-bench-%%' ORDER BY name")
    return [int(r[0]) for r in found], int(site_id)


def one_round(
    db: Database, nodes: list[int], site_id: int, rnd: int, ts: float, per_commit: int
) -> tuple[float, float, float]:
    """(resolver s, statements s, commit s) for every node's snapshot of one round."""
    resolve = statements = commit = 0.0
    for start in range(0, len(nodes), per_commit):
        t0 = time.perf_counter()
        snaps: list[Snapshot] = []
        for node in nodes[start : start + per_commit]:
            snaps += snapshots_of(node, site_id, entries(node, rnd, ts))
        t1 = time.perf_counter()
        inside: list[float] = []

        def work(tx: Tx, snaps: list[Snapshot] = snaps, inside: list[float] = inside) -> None:
            began = time.perf_counter()
            store_workloads(tx, snaps)
            inside.append(time.perf_counter() - began)

        db.transaction(work)
        t2 = time.perf_counter()
        resolve += t1 - t0
        statements += inside[0]
        commit += (t2 - t1) - inside[0]
    return resolve, statements, commit


def run(kind: str, rounds: int, per_commit: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db, pg_name = open_database(kind, Path(tmp))
        try:
            nodes, site_id = add_nodes(db)
            t0 = time.time() - rounds * ROUND_S - 60
            first = one_round(db, nodes, site_id, 0, t0, per_commit)
            # Statistics for the grown tables, as PostgreSQL's autovacuum gathers them: on
            # a fresh table the planner guesses a few rows and scans it whole.
            for table in ("fleet_workload", "fleet_gpuallocation", "fleet_workloadsnapshot"):
                db.query(f"ANALYZE {table}")
            steady = [
                one_round(db, nodes, site_id, r, t0 + r * ROUND_S, per_commit)
                for r in range(1, rounds + 1)
            ]
            open_rows = db.query("SELECT count(*) FROM fleet_gpuallocation WHERE ended IS NULL")
            all_rows = db.query("SELECT count(*) FROM fleet_gpuallocation")
        finally:
            db.close()
            if pg_name:
                services.drop_database(services.services_database_url(), pg_name)
    resolve, statements, commit = (sum(r[i] for r in steady) for i in range(3))
    snapshots = NODES * rounds
    ms = 1000 * (resolve + statements) / snapshots
    print(f"store: {kind}; {NODES} nodes × {GPUS} GPUs, {per_commit} snapshots per commit")
    print(f"first round (all opens)      {1000 * (first[0] + first[1]) / NODES:7.3f} ms/snapshot")
    print(f"resolver (Python)            {1000 * resolve / snapshots:7.3f} ms/snapshot")
    print(f"statements, steady           {1000 * statements / snapshots:7.3f} ms/snapshot")
    print(f"commit (shared with samples) {1000 * commit / snapshots:7.3f} ms/snapshot")
    print(f"intervals: {open_rows[0][0]} open, {all_rows[0][0]} in all after {rounds + 1} rounds")
    print(
        f"writer time per {ROUND_S:g} s round: {(resolve + statements) / rounds:.2f} s"
        f" ({100 * (resolve + statements) / rounds / ROUND_S:.1f} % of one writer)"
    )
    print(
        f"db={kind} nodes={NODES} gpus={NODES * GPUS} snapshots_per_s={1000 / ms:.0f}"
        f" ms_per_snapshot={ms:.3f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6, help="steady rounds timed")
    parser.add_argument("--per-commit", type=int, default=10, help="snapshots per commit")
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    run("sqlite", args.rounds, args.per_commit)
    if os.environ.get("DATABASE_URL"):
        run("postgres", args.rounds, args.per_commit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
