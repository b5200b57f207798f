"""Each GPU's health hours (`fw_gpu_health_1h`): per GPU and hour, what its health record
adds up over 30 days — resets and driver reloads, thermal slowdown time, and whether it ran
at or past its slowdown limit — so the record reads a few sparse rows instead of a month of
rollups (docs/gpu-health.md, "How the record is read").

Columns: `node_id`, `gpu`, `bucket` (the hour, epoch s), `resets` (buckets of the 1-minute
tier in which a counter the driver restarts went down), `last_reset` (the end of the last
of them), `slowdown_ns` (the hour's thermal slowdown, NULL where the GPU reports no
slowdown counter), `hot` (1 when the hour's hottest reading reached the slowdown limit),
`starts` (1 when a run of hot hours began in it). **Sparse**: a row only for an hour with
a reset, slowdown time or a hot reading; a healthy GPU has none.

One writer: the hourly GPU rollup (fleet/storage/rollups.py), in the transaction that writes
the hours from the 1-minute tier — `write_hours` for a range of hours, `rewrite_hours` for
the nodes and hours a late mark made it recompute (and the hour after each: an excursion's
start and a counter's increase are judged against the hour before). Until the rollup has
passed an hour, the record reads it from the tiers (fleet/read/health_record.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleet.read.health_record_sql import resets_sql, thermal_buckets_sql
from fleet.storage.late import pick_table

TABLE = "fw_gpu_health_1h"
HOUR_S = 3600


def create_sql(vendor: str) -> str:
    return (
        f"CREATE TABLE {TABLE} (node_id INTEGER NOT NULL, gpu INTEGER NOT NULL,"
        " bucket BIGINT NOT NULL, resets INTEGER NOT NULL, last_reset BIGINT,"
        " slowdown_ns BIGINT, hot SMALLINT NOT NULL, starts SMALLINT NOT NULL,"
        " PRIMARY KEY (node_id, gpu, bucket))"
    )


def hours_sql(
    lo: int, hi: int, node_ids: Sequence[int] | None = None, reset_tier: str = "1m"
) -> str:
    """INSERT the health hours of [lo, hi) (whole hours) for the nodes (every node: None):
    resets from `reset_tier` (the 1-minute tier while it keeps the hours; the migration
    that fills the table for hours before it reaches uses the hourly tier), slowdown time
    and hot hours from the hourly tier."""
    step = 60 if reset_tier == "1m" else HOUR_S
    resets = resets_sql(reset_tier, node_ids, lo - step, hi, count_from=lo)
    thermal = thermal_buckets_sql(node_ids, lo - HOUR_S, hi, "1h", count_from=lo)
    both = (
        f"SELECT node_id, gpu, (bucket / {HOUR_S}) * {HOUR_S} AS hour, 1 AS resets,"
        f" bucket + {step} AS last_reset, CAST(NULL AS BIGINT) AS ns, 0 AS hot, 0 AS starts"
        f" FROM ({resets}) rs"
        " UNION ALL SELECT node_id, gpu, bucket, 0, CAST(NULL AS BIGINT),"
        " CAST(ns AS BIGINT), COALESCE(hot, 0), COALESCE(starts, 0)"
        f" FROM ({thermal}) th"
    )
    return (
        f"INSERT INTO {TABLE} (node_id, gpu, bucket, resets, last_reset, slowdown_ns, hot, starts)"
        " SELECT node_id, gpu, hour, SUM(resets), MAX(last_reset), SUM(ns), MAX(hot), MAX(starts)"
        f" FROM ({both}) u GROUP BY node_id, gpu, hour"
        " HAVING SUM(resets) > 0 OR SUM(ns) > 0 OR MAX(hot) = 1"
    )


def fill_history(cur: Any, done: int, window_s: int) -> None:
    """Write the health hours of the `window_s` before `done` (the hourly GPU tier's
    progress), as migration 0028 does for an installation that had none: resets from the
    1-minute tier for the whole hours it still keeps, from the hourly tier before them."""
    if done <= 0:
        return
    lo = done - window_s
    cur.execute("SELECT MIN(bucket) FROM fw_gpu_1m")
    oldest = cur.fetchone()
    # The first whole hour the 1-minute tier holds (its oldest minute may be inside one).
    first = done if not oldest or oldest[0] is None else -(-int(oldest[0]) // HOUR_S) * HOUR_S
    minutes_from = min(max(first, lo), done)
    cur.execute(f"DELETE FROM {TABLE} WHERE bucket >= %s AND bucket < %s", [lo, done])
    if lo < minutes_from:
        cur.execute(hours_sql(lo, minutes_from, reset_tier="1h"))
    if minutes_from < done:
        cur.execute(hours_sql(minutes_from, done))


def write_hours(cur: Any, lo: int, hi: int) -> None:
    """Replace every GPU's health hours in [lo, hi), as the hourly rollup just wrote them."""
    cur.execute(f"DELETE FROM {TABLE} WHERE bucket >= %s AND bucket < %s", [lo, hi])
    cur.execute(hours_sql(lo, hi))


def rewrite_hours(cur: Any, before: int) -> None:
    """Replace the health hours of the nodes and hours in the rollup's picked marks
    (late.pick_table('gpu')), and of the hour after each, from the tiers as they are now —
    only hours before `before`, the hourly tier's progress (the record reads later hours
    from the tiers). The picked hours of a late replay lie together, so one range per node
    is read."""
    cur.execute(
        f"SELECT node_id, MIN(bucket), MAX(bucket) FROM {pick_table('gpu')} GROUP BY node_id"
    )
    spans: dict[tuple[int, int], list[int]] = {}
    for node_id, first, last in cur.fetchall():
        lo = int(first) // HOUR_S * HOUR_S
        hi = min(int(last) // HOUR_S * HOUR_S + 2 * HOUR_S, before)
        if lo >= hi:
            continue
        spans.setdefault((lo, hi), []).append(int(node_id))
    for (lo, hi), node_ids in spans.items():
        ids = ", ".join(str(i) for i in node_ids)
        cur.execute(
            f"DELETE FROM {TABLE} WHERE node_id IN ({ids}) AND bucket >= %s AND bucket < %s",
            [lo, hi],
        )
        cur.execute(hours_sql(lo, hi, node_ids))
