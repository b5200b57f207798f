"""The SQL of stranded capacity (fleet/read/capacity.py): each rack's measured draw per
rollup bucket and its p95/p99 over a window, on both engines.

A rack's draw in a bucket follows `fleet.health.rack_power`, the rule the live pages use
(its words: `fleet.words.SOURCE_WORDS`): the rack's own meter (PDU) where it reported,
else the sum of its nodes' meters where every node that reported in the bucket has one,
else the sum of its GPUs' power (an undercount). A node "reported" in a bucket when it has
a node or a GPU row there, as a node is fresh live when either is.

Percentiles are `percentile_cont` (linear interpolation between the two nearest ranks) on
PostgreSQL. SQLite has no ordered-set aggregates, so the same interpolation is written out
with window functions: rank i (from 0) of n values, position p × (n − 1), the two rows
around it weighted by the fraction. tests/fleet/test_capacity.py holds both to a
pure-Python oracle.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction

from fleet.storage.dialect import POSTGRESQL
from fleet.storage.schema import TIER_SECONDS, latest_table, rollup_table

__all__ = (
    "RackDraw",
    "enforced_limits",
    "model_p95",
    "rack_draws",
    "rack_series_params",
    "rack_series_sql",
    "rack_utilisation",
)

# The racks of one site, for every statement below.
_SITE_RACKS = (
    "SELECT r.id FROM fleet_rack r JOIN fleet_hall h ON h.id = r.hall_id WHERE h.site_id = %s"
)


# A NULL of the bucket means' type: PostgreSQL reads a bare NULL in a CTE as text.
_NULL = "CAST(NULL AS DOUBLE PRECISION)"


@dataclass(frozen=True, slots=True)
class RackDraw:
    rack_id: int
    p95_w: float
    p99_w: float
    buckets: int  # buckets with a measured draw
    sources: dict[str, int]  # power source → buckets it gave the draw


def _window(table: str, step: int) -> str:
    """Whole buckets inside [since, until): two parameters."""
    return f"{table}.bucket >= %s AND {table}.bucket + {step} <= %s"


def _per_node_sql(tier: str, name: str, unpowered_only: bool) -> str:
    """A CTE `name`: each node's meter and its GPUs' sum per bucket (six parameters).
    `unpowered_only`: only the buckets the rack's PDU did not report (`pdu`, `covered`)."""
    step = TIER_SECONDS[tier]
    racks = f"n.rack_id IN ({_SITE_RACKS})"
    if unpowered_only:
        racks += " AND n.rack_id NOT IN (SELECT rack_id FROM covered)"

    def skip(table: str) -> str:
        if not unpowered_only:
            return ""
        return (
            " AND NOT EXISTS (SELECT 1 FROM pdu"
            f" WHERE pdu.rack_id = n.rack_id AND pdu.bucket = {table}.bucket)"
        )

    return f"""
{name} AS (
  SELECT rack_id, node_id, bucket, MAX(meter) AS meter, MAX(gpus) AS gpus FROM (
    SELECT n.rack_id, r.node_id, r.bucket, r.power_w_mean AS meter, {_NULL} AS gpus
    FROM {rollup_table("node", tier)} r JOIN fleet_node n ON n.id = r.node_id
    WHERE {racks} AND {_window("r", step)}{skip("r")}
    UNION ALL
    SELECT n.rack_id, g.node_id, g.bucket, {_NULL} AS meter, SUM(g.power_w_mean) AS gpus
    FROM {rollup_table("gpu", tier)} g JOIN fleet_node n ON n.id = g.node_id
    WHERE {racks} AND {_window("g", step)}{skip("g")}
    GROUP BY n.rack_id, g.node_id, g.bucket
  ) both_kinds
  GROUP BY rack_id, node_id, bucket
),"""


def rack_series_sql(tier: str) -> str:
    """CTEs (after a WITH) ending in `series`: each rack's draw per whole bucket in
    [since, until) with its source; parameters `rack_series_params(site, since, until)`.
    `per_node` is every node's meter and GPU sum per bucket (read only where selected).
    Shared with fleet/read/forecast_sources.py: one rule for a rack's draw."""
    step = TIER_SECONDS[tier]
    # A node's or GPU's row in a bucket where the rack's PDU reported cannot change that
    # bucket's draw, so `series` sums only the other buckets (`unpowered`), and reads no
    # row of a rack whose PDU reported in every whole bucket of the window (`covered`:
    # buckets are multiples of the step). At 10,000 GPUs summing every row was most of a
    # forecast pass (docs/forecast.md "Cost").
    whole = _whole_buckets(step)
    return f"""
pdu AS (
  SELECT m.rack_id, m.bucket, m.power_w_mean AS w FROM {rollup_table("rack", tier)} m
  WHERE m.rack_id IN ({_SITE_RACKS}) AND {_window("m", step)} AND power_w_mean IS NOT NULL
),
covered AS (SELECT rack_id FROM pdu GROUP BY rack_id HAVING COUNT(*) >= {whole} + 1),
{_per_node_sql(tier, "per_node", unpowered_only=False)}
{_per_node_sql(tier, "unpowered", unpowered_only=True)}
nodes AS (
  SELECT rack_id, bucket, COUNT(*) AS reporting, COUNT(meter) AS metered,
    SUM(meter) AS meters, SUM(gpus) AS gpus
  FROM unpowered GROUP BY rack_id, bucket
),
bucket_keys AS (SELECT rack_id, bucket FROM pdu UNION SELECT rack_id, bucket FROM nodes),
series AS (
  SELECT k.rack_id, k.bucket,
    CASE WHEN p.w IS NOT NULL THEN p.w
      WHEN c.metered = c.reporting THEN c.meters ELSE c.gpus END AS w,
    CASE WHEN p.w IS NOT NULL THEN 'pdu'
      WHEN c.metered = c.reporting THEN 'nodes' ELSE 'gpus' END AS source
  FROM bucket_keys k
  LEFT JOIN pdu p ON p.rack_id = k.rack_id AND p.bucket = k.bucket
  LEFT JOIN nodes c ON c.rack_id = k.rack_id AND c.bucket = k.bucket
),
drawn AS (SELECT rack_id, w, source FROM series WHERE w IS NOT NULL)
"""


# The sources a bucket's draw can come from (`fleet.health.PowerSource`, less "none"),
# counted per rack in the statement that ranks the draws.
SOURCES = ("pdu", "nodes", "gpus")
_SOURCE_COUNTS = ", ".join(f"SUM(CASE WHEN source = '{s}' THEN 1 ELSE 0 END)" for s in SOURCES)


def _interpolated(p: float) -> str:
    """percentile_cont(p) over ranked rows (i from 0, n per rack), as a SUM's argument."""
    pos = f"({p} * (n - 1))"
    low = f"CAST({pos} AS INTEGER)"  # positions are never negative: truncation is floor
    frac = f"({pos} - {low})"
    return (
        f"CASE WHEN i = {low} THEN w * (1 - {frac}) WHEN i = {low} + 1 THEN w * {frac} ELSE 0 END"
    )


def _percentiles_sql(tier: str, vendor: str) -> str:
    head = "WITH " + rack_series_sql(tier)
    if vendor == POSTGRESQL:
        return head + (
            "SELECT rack_id, percentile_cont(0.95) WITHIN GROUP (ORDER BY w),"
            f" percentile_cont(0.99) WITHIN GROUP (ORDER BY w), COUNT(*), {_SOURCE_COUNTS}"
            " FROM drawn GROUP BY rack_id"
        )
    return head + (
        ", ranked AS (SELECT rack_id, w, source,"
        " ROW_NUMBER() OVER (PARTITION BY rack_id ORDER BY w) - 1 AS i,"
        " COUNT(*) OVER (PARTITION BY rack_id) AS n FROM drawn)"
        f" SELECT rack_id, SUM({_interpolated(0.95)}), SUM({_interpolated(0.99)}), MAX(n),"
        f" {_SOURCE_COUNTS} FROM ranked GROUP BY rack_id"
    )


def rack_series_params(site_id: int, since: float, until: float) -> list[Any]:
    """The parameters of `rack_series_sql`: (site, since, until) for each of its five reads,
    and (until, since) for the count of whole buckets after the first."""
    window = [site_id, int(since), int(until)]
    return [*window, int(until), int(since), *window * 4]


def rack_draws(site_id: int, since: float, until: float, tier: str, using: str) -> list[RackDraw]:
    """Each rack of the site with a measured draw in [since, until): its p95 and p99 (W)
    over the tier's bucket means, how many buckets, and which source gave them."""
    vendor = connections[using].vendor
    with transaction.atomic(using=using), connections[using].cursor() as cur:
        if vendor == POSTGRESQL:
            # Its cost estimate triggers JIT, which compiled for ~1 s to run a 0.56 s
            # statement (500 racks, 30 days of hours; docs/benchmarks.md "Headroom by rack").
            # SET LOCAL: for this transaction only, as the rollups do (fleet/storage/dialect.py).
            cur.execute("SET LOCAL jit = off")
        cur.execute(_percentiles_sql(tier, vendor), rack_series_params(site_id, since, until))
        rows = cur.fetchall()
    return [
        RackDraw(
            int(r[0]),
            float(r[1]),
            float(r[2]),
            int(r[3]),
            {source: int(count) for source, count in zip(SOURCES, r[4:], strict=True) if count},
        )
        for r in rows
    ]


def _whole_buckets(step: int) -> str:
    """Whole buckets in [since, until) after the first: parameters (until, since)."""
    return f"(CAST(%s AS BIGINT) - {step}) / {step} - (CAST(%s AS BIGINT) + {step - 1}) / {step}"


def _site_nodes(one_model: bool) -> str:
    """The site's nodes (or those of one model): parameters site[, model]."""
    model = " AND n.model = %s" if one_model else ""
    return f"SELECT n.id, n.model FROM fleet_node n WHERE n.rack_id IN ({_SITE_RACKS}){model}"


def _partly_metered_sql(tier: str, one_model: bool) -> str:
    """The site's nodes whose meter missed a whole bucket of the window: parameters site,
    [model], since, until, until, since."""
    step = TIER_SECONDS[tier]
    return (
        f"WITH site_nodes AS ({_site_nodes(one_model)})"
        " SELECT s.id FROM site_nodes s LEFT JOIN ("
        f"SELECT m.node_id, COUNT(*) AS c FROM {rollup_table('node', tier)} m"
        " WHERE m.node_id IN (SELECT id FROM site_nodes)"
        f" AND {_window('m', step)} AND m.power_w_mean IS NOT NULL GROUP BY m.node_id"
        f") k ON k.node_id = s.id WHERE k.c IS NULL OR k.c < {_whole_buckets(step)} + 1"
    )


def _model_p95_sql(tier: str, vendor: str, one_model: bool, partly: int) -> str:
    """p95 of each node model's per-node bucket draws, grouped by model (on SQLite the
    draws, for `percentile_cont` here): every meter, and the GPU sums of the `partly`
    metered nodes (their ids the last parameters) in the buckets their meter missed.
    Parameters: site, [model], since, until, since, until, ids."""
    step = TIER_SECONDS[tier]
    gpus = ""
    if partly:
        ids = ", ".join(["%s"] * partly)
        gpus = f""",
gpus AS (
  SELECT n.model, SUM(g.power_w_mean) AS w
  FROM {rollup_table("gpu", tier)} g JOIN site_nodes n ON n.id = g.node_id
  WHERE {_window("g", step)} AND g.node_id IN ({ids})
    AND NOT EXISTS (SELECT 1 FROM meters m WHERE m.node_id = g.node_id AND m.bucket = g.bucket)
  GROUP BY n.model, g.node_id, g.bucket
)"""
    union = " UNION ALL SELECT model, w FROM gpus WHERE w IS NOT NULL" if partly else ""
    head = f"""WITH
site_nodes AS ({_site_nodes(one_model)}),
meters AS (
  SELECT n.model, m.node_id, m.bucket, m.power_w_mean AS w
  FROM {rollup_table("node", tier)} m JOIN site_nodes n ON n.id = m.node_id
  WHERE {_window("m", step)} AND m.power_w_mean IS NOT NULL
){gpus},
model_draws AS (
  SELECT model, w FROM meters{union}
)"""
    if vendor == POSTGRESQL:
        return head + (
            " SELECT model, percentile_cont(0.95) WITHIN GROUP (ORDER BY w)"
            " FROM model_draws GROUP BY model"
        )
    # SQLite: the draws themselves, ranked here (`percentile_cont`). Ranking 1.5 M rows
    # with window functions took 4.3 s at 500 racks, reading them and sorting here ~1 s.
    return head + " SELECT model, w FROM model_draws"


def percentile_cont(ordered: list[float], p: float) -> float:
    """PostgreSQL's percentile_cont of sorted values: linear between the two nearest ranks."""
    pos = p * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def model_p95(
    site_id: int, since: float, until: float, tier: str, using: str, model: str | None = None
) -> dict[str, float]:
    """Each node model of the site (or only `model`) with a measured draw in [since, until):
    the p95 (W) of its nodes' bucket draws, all its nodes' buckets together — the capacity
    answer's per-server power and the list of models the capacity form offers.

    A node's draw in a bucket is `per_node`'s rule (its meter, else its GPUs' sum), read in
    two statements whatever the site's size: which nodes' meters missed a bucket, then every
    meter and only those nodes' GPU rows in the buckets missed. At 500 racks reading every
    GPU row (or letting the planner choose when) took seconds (docs/benchmarks.md)."""
    vendor = connections[using].vendor
    window = [int(since), int(until)]
    head: list[Any] = [site_id, *([] if model is None else [model])]
    with connections[using].cursor() as cur:
        cur.execute(_partly_metered_sql(tier, model is not None), [*head, *window, *window[::-1]])
        partly = [int(n) for (n,) in cur.fetchall()]
        cur.execute(
            _model_p95_sql(tier, vendor, model is not None, len(partly)),
            [*head, *window, *(window if partly else []), *partly],
        )
        rows = cur.fetchall()
    if vendor == POSTGRESQL:
        return {str(m): float(w) for m, w in rows if w is not None}
    draws: dict[str, list[float]] = defaultdict(list)
    for m, w in rows:
        draws[str(m)].append(float(w))
    return {m: percentile_cont(sorted(ws), 0.95) for m, ws in draws.items()}


def rack_utilisation(
    site_id: int, since: float, until: float, tier: str, using: str
) -> dict[int, float]:
    """Each rack's mean GPU utilisation (%) over the window: the mean of its GPUs' bucket
    means, every GPU-bucket weighing the same."""
    step = TIER_SECONDS[tier]
    with connections[using].cursor() as cur:
        cur.execute(
            f"SELECT n.rack_id, AVG(g.util_gpu_pct_mean) FROM {rollup_table('gpu', tier)} g"
            " JOIN fleet_node n ON n.id = g.node_id"
            f" WHERE n.rack_id IN ({_SITE_RACKS}) AND g.bucket >= %s AND g.bucket + {step} <= %s"
            " AND g.util_gpu_pct_mean IS NOT NULL GROUP BY n.rack_id",
            [site_id, int(since), int(until)],
        )
        return {int(r): float(u) for r, u in cur.fetchall()}


def enforced_limits(site_id: int, since: float, using: str) -> dict[tuple[int, int], float]:
    """Each GPU's enforced power limit now (W), by (node id, GPU index): its latest value,
    where that was sampled inside the window."""
    with connections[using].cursor() as cur:
        cur.execute(
            f"SELECT l.node_id, l.gpu, l.power_limit_w FROM {latest_table('gpu')} l"
            " JOIN fleet_node n ON n.id = l.node_id"
            f" WHERE n.rack_id IN ({_SITE_RACKS}) AND l.power_limit_w IS NOT NULL"
            " AND l.power_limit_w_ts >= %s",
            [site_id, since],
        )
        return {(int(n), int(g)): float(w) for n, g, w in cur.fetchall()}
