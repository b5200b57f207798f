"""SM activity of workloads sharing a GPU, kept per minute on every database tier
(fw_gpu_share_1m, written with the node's snapshot by fleet/storage/workloads.py): what the
ledger splits a shared GPU's energy by (docs/ledger.md, A job's energy)."""

from __future__ import annotations

from typing import Any

from django.db import connections

from fleet.models import Workload
from fleet.storage.retention import apply_retention, kept_s
from tests.support import databases
from tests.support.databases import T, TierDb
from tests.support.workload_store import a_node, store

db = databases.fresh_tier_db  # each test's own database, both tiers

ANA = {"kind": "user", "uid": 1000, "user": "ana"}
BOB = {"kind": "user", "uid": 1001, "user": "bob"}
JOB = {"kind": "slurm", "job": "4242"}
MINUTE = T - T % 60


def process(pid: int, owner: dict[str, Any], sm_pct: float | None) -> dict[str, Any]:
    return {"pid": pid, "sm_pct": sm_pct, "owner": owner}


def shares(db: TierDb) -> list[tuple[int, int, str, float, int]]:
    """(minute, GPU, workload key, SM summed, snapshots) per kept row."""
    keys = dict(Workload.objects.using(db.alias).values_list("id", "key"))
    with connections[db.alias].cursor() as cur:
        cur.execute(
            "SELECT bucket, gpu, workload_id, sm_sum, samples FROM fw_gpu_share_1m"
            " ORDER BY bucket, gpu, workload_id"
        )
        return [(int(b), int(g), keys[w], float(sm), int(n)) for b, g, w, sm, n in cur]


def test_each_sharing_workloads_sm_activity_adds_up_per_minute_and_a_resend_adds_nothing(
    db: TierDb,
) -> None:
    node = a_node(db)
    shared = {
        "gpu": 0,
        "allocation": None,
        # two of ana's processes count as one workload: 50 + 10
        "processes": [process(7, ANA, 50.0), process(8, ANA, 10.0), process(9, BOB, 20.0)],
    }
    store(db, node, MINUTE + 5, shared)
    store(db, node, MINUTE + 15, shared)
    store(db, node, MINUTE + 15, shared)  # resent
    store(db, node, MINUTE + 65, shared)  # the next minute
    assert shares(db) == [
        (MINUTE, 0, "1000", 120.0, 2),
        (MINUTE, 0, "1001", 40.0, 2),
        (MINUTE + 60, 0, "1000", 60.0, 1),
        (MINUTE + 60, 0, "1001", 20.0, 1),
    ]


def test_an_exclusive_gpu_or_one_without_sm_activity_keeps_nothing(db: TierDb) -> None:
    node = a_node(db)
    exclusive = {"gpu": 0, "allocation": JOB, "processes": [process(77, JOB, 90.0)]}
    # MIG devices of one GPU: NVML reports no SM activity per process there
    mig = [
        {"gpu": 1, "mig": f"MIG-{k}", "allocation": None, "processes": [process(k, who, None)]}
        for k, who in ((100, ANA), (101, BOB))
    ]
    store(db, node, MINUTE + 5, exclusive, *mig)
    assert shares(db) == []


def test_sm_activity_is_kept_as_long_as_the_minute_tier(db: TierDb) -> None:
    horizon = MINUTE - kept_s("1m", "gpu")
    rows = [(int(horizon) - 60, 7.0), (int(horizon), 8.0), (MINUTE - 60, 9.0)]
    with connections[db.alias].cursor() as cur:
        for bucket, sm in rows:
            cur.execute(
                "INSERT INTO fw_gpu_share_1m (bucket, node_id, gpu, workload_id, sm_sum,"
                " samples) VALUES (%s, 1, 0, 1, %s, 1)",
                [bucket, sm],
            )
    apply_retention(MINUTE, using=db.alias)
    with connections[db.alias].cursor() as cur:
        cur.execute("SELECT bucket FROM fw_gpu_share_1m ORDER BY bucket")
        assert [int(b) for (b,) in cur] == [int(horizon), MINUTE - 60]
