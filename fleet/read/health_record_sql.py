"""The health record's reads of the 1m/1h tiers, as set-based SQL for SQLite and PostgreSQL:
one statement per tier for the resets and driver reloads of a site's GPUs, one for their
thermal time, one for their last hour against their peers. Every value put into the SQL
text is an int (ids, epoch seconds); nothing a user typed, so nothing is bound.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleet.health.peers import SLOWDOWN_REASONS
from fleet.storage.schema import TIER_SECONDS, rollup_table

# Counters a GPU reset or a driver reload starts again from zero (docs/gpu-health.md):
# the energy counter (since the driver loaded), the volatile ECC counts, and the pending
# remap flag (cleared only by a reset).
RESET_COUNTERS = ("energy_j", "ecc_sbe_vol_total", "ecc_dbe_vol_total", "remap_pending")


def _ids(node_ids: Sequence[int]) -> str:
    return ", ".join(str(int(i)) for i in node_ids) or "NULL"


def _of_nodes(column: str, node_ids: Sequence[int] | None) -> str:
    """The node filter: `column IN (…)`, or none (every node) when `node_ids` is None."""
    return "" if node_ids is None else f" AND {column} IN ({_ids(node_ids)})"


def _went_down(metric: str) -> str:
    """The counter fell in the bucket: below its previous bucket's last value, or its last
    value below its own maximum (it fell inside the bucket). NULLs compare false."""
    return f"({metric}_min < {metric}_prev OR {metric}_last < {metric}_max)"


def resets_sql(
    tier: str, node_ids: Sequence[int] | None, lo: int, hi: int, count_from: int | None = None
) -> str:
    """node_id, gpu, bucket: each bucket of [count_from, hi) in which a GPU of the nodes (of
    every node: None) was reset or its driver reloaded (one of RESET_COUNTERS went down).
    Buckets from `lo` are read, so the bucket before `count_from` is what the first one is
    compared with; `count_from` defaults to `lo`."""
    lags = ", ".join(f"LAG({m}_last) OVER w AS {m}_prev" for m in RESET_COUNTERS)
    stats = ", ".join(f"{m}_min, {m}_max, {m}_last" for m in RESET_COUNTERS)
    fell = " OR ".join(_went_down(m) for m in RESET_COUNTERS)
    start = int(lo if count_from is None else count_from)
    return (
        f"SELECT node_id, gpu, bucket FROM (SELECT node_id, gpu, bucket, {stats}, {lags}"
        f" FROM {rollup_table('gpu', tier)} WHERE bucket >= {int(lo)} AND bucket < {int(hi)}"
        f"{_of_nodes('node_id', node_ids)}"
        " WINDOW w AS (PARTITION BY node_id, gpu ORDER BY bucket)) r"
        f" WHERE ({fell}) AND bucket >= {start} ORDER BY node_id, gpu, bucket"
    )


def _increase(metric: str) -> str:
    """A counter's increase over the bucket: from the previous bucket's last value (a
    counter that restarted counts from zero), else within the bucket."""
    last, prev = f"{metric}_last", f"{metric}_prev"
    return (
        f"CASE WHEN {prev} IS NULL THEN {last} - {metric}_min"
        f" WHEN {last} >= {prev} THEN {last} - {prev} ELSE {last} END"
    )


def thermal_buckets_sql(
    node_ids: Sequence[int] | None, lo: int, hi: int, tier: str, count_from: int | None = None
) -> str:
    """node_id, gpu, bucket, thermal slowdown (ns), excursion start (0/1), hot (0/1) of each
    bucket of [count_from, hi) of the nodes (every node: None); buckets from `lo` are read
    for the comparison with the bucket before.

    Thermal slowdown: the larger of the SW and HW thermal slowdown counters' increase in
    the bucket (they can run at once: summing would count the same time twice); NULL where
    the GPU reports neither. Hot: the bucket's hottest reading is at or past the GPU's
    slowdown limit in force (entered, else reported); an excursion starts in a hot bucket
    whose previous bucket was not hot. Both NULL without a limit."""
    step = TIER_SECONDS[tier]
    sw, hw = _increase("slowdown_sw_thermal_ns"), _increase("slowdown_hw_thermal_ns")
    lags = (
        "LAG(slowdown_sw_thermal_ns_last) OVER w AS slowdown_sw_thermal_ns_prev,"
        " LAG(slowdown_hw_thermal_ns_last) OVER w AS slowdown_hw_thermal_ns_prev"
    )
    rows = (
        "SELECT x.node_id, x.gpu, x.bucket, temp_gpu_c_max, slowdown_sw_thermal_ns_min,"
        " slowdown_sw_thermal_ns_last, slowdown_hw_thermal_ns_min, slowdown_hw_thermal_ns_last,"
        f" {lags}, COALESCE(g.slowdown_c, g.reported_slowdown_c) AS lim"
        f" FROM {rollup_table('gpu', tier)} x LEFT JOIN fleet_gpu g"
        ' ON g.node_id = x.node_id AND g."index" = x.gpu'
        f" WHERE x.bucket >= {int(lo)} AND x.bucket < {int(hi)}{_of_nodes('x.node_id', node_ids)}"
        " WINDOW w AS (PARTITION BY x.node_id, x.gpu ORDER BY x.bucket)"
    )
    per_bucket = (
        f"SELECT node_id, gpu, bucket, ({sw}) AS sw, ({hw}) AS hw,"
        " CASE WHEN lim IS NULL THEN NULL WHEN temp_gpu_c_max >= lim THEN 1 ELSE 0 END AS hot"
        " FROM r"
    )
    runs = (
        "SELECT node_id, gpu, bucket, hot, CASE WHEN sw IS NULL THEN hw WHEN hw IS NULL THEN sw"
        " WHEN sw >= hw THEN sw ELSE hw END AS ns, LAG(hot) OVER w AS hot_prev,"
        " LAG(bucket) OVER w AS b_prev FROM b"
        " WINDOW w AS (PARTITION BY node_id, gpu ORDER BY bucket)"
    )
    starts = (
        "CASE WHEN hot IS NULL THEN NULL WHEN hot = 1 AND NOT (COALESCE(hot_prev, 0) = 1"
        f" AND COALESCE(b_prev, -1) = bucket - {step}) THEN 1 ELSE 0 END"
    )
    start = int(lo if count_from is None else count_from)
    return (
        f"WITH r AS ({rows}), b AS ({per_bucket}), u AS ({runs})"
        f" SELECT node_id, gpu, bucket, ns, {starts} AS starts, hot FROM u"
        f" WHERE bucket >= {start}"
    )


def thermal_sql(
    node_ids: Sequence[int], lo: int, hi: int, tier: str = "1h", count_from: int | None = None
) -> str:
    """node_id, gpu, thermal slowdown (ns), excursions, hours past slowdown over
    [count_from, hi) (`thermal_buckets_sql` summed per GPU)."""
    per_bucket = thermal_buckets_sql(node_ids, lo, hi, tier, count_from)
    return (
        f"SELECT node_id, gpu, SUM(ns), SUM(starts), SUM(hot) FROM ({per_bucket}) t"
        " GROUP BY node_id, gpu"
    )


def stored_hours_sql(node_ids: Sequence[int], lo: int, hi: int) -> str:
    """node_id, gpu, resets, end of the last reset's bucket, thermal slowdown (ns),
    excursion starts over the stored health hours of [lo, hi) (fleet/storage/health_hours.py;
    a GPU without a row had none of them)."""
    return (
        "SELECT node_id, gpu, SUM(resets), MAX(last_reset), SUM(slowdown_ns), SUM(starts)"
        f" FROM fw_gpu_health_1h WHERE bucket >= {int(lo)} AND bucket < {int(hi)}"
        f"{_of_nodes('node_id', node_ids)} GROUP BY node_id, gpu"
    )


def peers_sql(node_ids: Sequence[int], lo: int, hi: int) -> str:
    """node_id, gpu, minutes, mean temperature, mean power, minutes with a clock-event reason
    known, of them minutes slowed (a reason in SLOWDOWN_REASONS), over the 1m tier's [lo, hi).

    The means are over the minutes with both a temperature and a power mean, so a GPU is
    compared at the power it ran at while its temperature was read. A minute is slowed when
    its lowest, highest or last reason mask has a slowdown bit (the tier keeps no OR of the
    masks; the three readings are what it has)."""
    mask = int(SLOWDOWN_REASONS)
    both = "temp_gpu_c_mean IS NOT NULL AND power_w_mean IS NOT NULL"
    reasons = (
        "(COALESCE(clock_event_reasons_min, 0) | COALESCE(clock_event_reasons_max, 0)"
        " | COALESCE(clock_event_reasons_last, 0))"
    )
    known = (
        "clock_event_reasons_last IS NOT NULL OR clock_event_reasons_min IS NOT NULL"
        " OR clock_event_reasons_max IS NOT NULL"
    )
    return (
        f"SELECT node_id, gpu, SUM(CASE WHEN {both} THEN 1 ELSE 0 END),"
        f" AVG(CASE WHEN {both} THEN temp_gpu_c_mean END),"
        f" AVG(CASE WHEN {both} THEN power_w_mean END),"
        f" SUM(CASE WHEN {known} THEN 1 ELSE 0 END),"
        f" SUM(CASE WHEN ({known}) AND ({reasons} & {mask}) <> 0 THEN 1 ELSE 0 END)"
        f" FROM {rollup_table('gpu', '1m')} WHERE node_id IN ({_ids(node_ids)})"
        f" AND bucket >= {int(lo)} AND bucket < {int(hi)} GROUP BY node_id, gpu"
    )
