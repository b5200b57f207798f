"""1-minute and 1-hour rollups against what the raw tier holds, on every tier.

A known series goes straight into the raw tables (several GPUs and nodes, a
slow field present in only some samples, a counter, an integer gauge); the
expected min/mean/max/last per bucket is computed in Python from the same
rows, and the rollup tables must equal it exactly.

Each test gets its own migrated database (tests/support/databases.py); the known
series and the oracle are tests/support/rollup_oracle.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections

from fleet.storage.late import late_table
from fleet.storage.rollups import claim, read_state, rollup
from fleet.storage.schema import ENTITY_COLUMNS
from tests.support import databases
from tests.support.databases import T, TierDb
from tests.support.rollup_oracle import GPUS, expected, gpu_row, roll, series, store_raw, stored

db = databases.fresh_db_at_test_clock  # each test's own database, both tiers


def state(db: TierDb, tier: str, kind: str) -> tuple[int, int]:
    """(done_until, pending late marks) of a tier."""
    with connections[db.alias].cursor() as cur:
        found = read_state(cur, tier, kind)
    assert found is not None
    pending = db.execute(f"SELECT count(*) FROM {late_table(kind)} WHERE tier = %s", [tier])
    return found.done_until, int(pending[0][0])


def mark_late(db: TierDb, kind: str, tier: str, rows: Sequence[Sequence[Any]]) -> None:
    """What the ingest commit does for rows before the seal: one mark per (entity, bucket)
    of `tier` that the rows (raw rows: ts, entity…) fall in."""
    nkeys = len(ENTITY_COLUMNS[kind])
    step = 60 if tier == "1m" else 3600
    marks = {(*r[1 : 1 + nkeys], int(r[0]) // step * step) for r in rows}
    db.insert(
        late_table(kind),
        (*ENTITY_COLUMNS[kind], "tier", "bucket"),
        [(*m[:-1], tier, m[-1]) for m in sorted(marks)],
    )


# ---------------------------------------------------------------------------


def test_minute_rollups_hold_min_mean_max_and_last_of_the_raw_samples(db: TierDb) -> None:
    raw = series(T - 7200, T + 30)
    store_raw(db, raw)
    roll(db, T + 30)
    for kind in ("gpu", "node"):
        assert stored(db, kind, "1m") == expected(kind, raw[kind], 60, before=T)
    # last of a slow field comes from the newest sample that carries it
    assert db.execute(
        "SELECT mem_total_mib_last FROM fw_gpu_1m WHERE node_id = 1 AND gpu = 0 AND bucket = %s",
        [T - 60],
    ) == [(gpu_row(T - 30, 1, 0)[4],)]


def test_hour_rollups_agree_with_the_raw_samples(db: TierDb) -> None:
    raw = series(T - 7200, T + 30)
    store_raw(db, raw)
    roll(db, T + 30)
    for kind in ("gpu", "node"):
        hours = stored(db, kind, "1h")
        assert sorted({key[-1] for key in hours}) == [T - 7200, T - 3600]
        assert hours == expected(kind, raw[kind], 3600, before=T)


def test_a_minute_is_rolled_up_only_once_it_is_complete_and_past_the_grace(db: TierDb) -> None:
    raw = series(T - 120, T + 60)
    store_raw(db, raw)
    roll(db, T + 69)  # the minute starting at T ended 9 s ago: batches may still arrive
    assert {key[-1] for key in stored(db, "gpu", "1m")} == {T - 120, T - 60}
    roll(db, T + 71)
    assert stored(db, "gpu", "1m") == expected("gpu", raw["gpu"], 60, before=T + 60)
    assert state(db, "1m", "gpu") == (T + 60, 0)


def test_late_samples_marked_late_are_recomputed_in_both_tiers(db: TierDb) -> None:
    raw = series(T - 7200, T + 30)
    store_raw(db, raw)
    roll(db, T + 30)
    # An agent's spool arrives after a partition: samples in the oldest hour,
    # between the ones already stored, with a new last value for the slow field.
    late = series(T - 7000 + 2, T - 6500, every=5)
    late["gpu"] = [(*r[:4], 9999.0 if int(r[0]) % 60 == 52 else None, *r[5:]) for r in late["gpu"]]
    store_raw(db, late)
    # what the ingest commit does for rows before the 1m tier's seal
    for kind in ("gpu", "node"):
        mark_late(db, kind, "1m", late[kind])
    roll(db, T + 40)
    for kind in ("gpu", "node"):
        everything = raw[kind] + late[kind]
        assert stored(db, kind, "1m") == expected(kind, everything, 60, before=T)
        assert stored(db, kind, "1h") == expected(kind, everything, 3600, before=T)
        assert state(db, "1m", kind) == (T, 0)
        assert state(db, "1h", kind) == (T, 0)


def test_running_the_rollup_again_changes_nothing(db: TierDb) -> None:
    raw = series(T - 3600, T)
    store_raw(db, raw)
    roll(db, T + 30)
    before = stored(db, "gpu", "1m")
    # force a full recompute of what is already there
    mark_late(db, "gpu", "1m", raw["gpu"])
    roll(db, T + 30)
    assert stored(db, "gpu", "1m") == before
    assert len(before) == len(GPUS) * 60


def test_a_worker_holding_a_stale_state_cannot_claim_the_chunk(db: TierDb) -> None:
    store_raw(db, series(T - 600, T))
    rollup("1m", "gpu", T - 300, using=db.alias)
    with connections[db.alias].cursor() as cur:
        seen = read_state(cur, "1m", "gpu")
    assert seen is not None
    rollup("1m", "gpu", T + 30, using=db.alias)  # another worker got there first
    with connections[db.alias].cursor() as cur:
        assert not claim(cur, "1m", "gpu", seen)
        fresh = read_state(cur, "1m", "gpu")
        assert fresh is not None
        assert claim(cur, "1m", "gpu", fresh)


def test_a_resend_after_raw_retention_does_not_shrink_stored_minutes(db: TierDb) -> None:
    raw = series(T - 600, T)
    store_raw(db, raw)
    roll(db, T + 30)
    before = stored(db, "gpu", "1m")
    # Raw rows expire, then an agent resends part of an old batch (its ack was lost):
    # the recompute sees only the resent rows and must keep the fuller minute.
    db.execute("DELETE FROM fw_gpu_raw")
    resent = [r for r in raw["gpu"] if int(r[0]) % 60 < 20]
    store_raw(db, {"gpu": resent})
    mark_late(db, "gpu", "1m", resent)
    roll(db, T + 30)
    assert stored(db, "gpu", "1m") == before
