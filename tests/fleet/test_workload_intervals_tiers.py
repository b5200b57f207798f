"""Workload intervals on every database tier: the same snapshots, stored through the one
write path from a storage connection of the writer's own (SQLite and PostgreSQL), open,
keep and close the same intervals, and a resend changes nothing."""

from __future__ import annotations

from typing import Any

from fleet.models import GpuAllocation
from tests.support import databases
from tests.support.databases import T, TierDb
from tests.support.workload_store import a_node, store

db = databases.fresh_tier_db  # each test's own database, both tiers

JOB = {"kind": "slurm", "job": "4242", "user": "ana", "account": "physics"}
ANA = {"kind": "user", "uid": 1000, "user": "ana"}


def test_intervals_open_keep_and_close_alike_on_every_tier(db: TierDb) -> None:
    node = a_node(db)
    job = {"gpu": 0, "allocation": JOB, "processes": [{"pid": 77, "sm_pct": 9.0, "owner": JOB}]}
    ana = {"gpu": 1, "allocation": None, "processes": [{"pid": 7, "sm_pct": None, "owner": ANA}]}
    idle: dict[str, Any] = {"gpu": 1, "allocation": None, "processes": []}
    store(db, node, T, job, ana)
    store(db, node, T + 10, job, idle)
    store(db, node, T + 10, job, idle)  # resent
    rows = GpuAllocation.objects.using(db.alias).order_by("gpu", "source")
    got = [(a.gpu, a.workload.key, a.source, a.started, a.last_seen, a.ended) for a in rows]
    assert got == [
        (0, "4242", "process", T, T + 10, None),
        (0, "4242", "scheduler", T, T + 10, None),
        (1, "1000", "process", T, T, (T + (T + 10)) / 2),  # ended midway
    ]


def test_a_process_start_opens_its_interval_alike_on_every_tier(db: TierDb) -> None:
    node = a_node(db)
    idle: dict[str, Any] = {"gpu": 0, "allocation": None, "processes": []}
    job = {
        "gpu": 0,
        "allocation": JOB,
        "processes": [{"pid": 77, "sm_pct": 9.0, "started": T + 6, "owner": JOB}],
    }
    store(db, node, T, idle)
    store(db, node, T + 10, job)
    store(db, node, T + 10, job)  # resent
    store(db, node, T + 20, idle)
    rows = GpuAllocation.objects.using(db.alias).order_by("source")
    got = [(a.source, a.started, a.last_seen, a.ended) for a in rows]
    ended = (T + 10 + (T + 20)) / 2
    assert got == [("process", T + 6, T + 10, ended), ("scheduler", T + 6, T + 10, ended)]
