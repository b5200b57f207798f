"""The ledger's allocated-idle judgement for the present, as SQL over the 1-minute tier:
which held GPUs were idle in every one of the last `idle_minutes` minutes (the efficiency
page's "idle now", fleet/read/efficiency.py). The minute's test is the ledger's own
(`idle_reading`, fleet/read/ledger_sql.py), so the page and the ledger agree."""

from __future__ import annotations

from fleet.read.ledger_rules import LedgerRules
from fleet.read.ledger_sql import idle_reading
from fleet.storage.schema import rollup_table


def idle_now_sql(site_id: int, b: int, rules: LedgerRules) -> str:
    """(node, GPU) of the site's GPUs an open scheduler allocation holds that were idle in
    every one of the `idle_minutes` minutes before `b` (each with a row: a missing minute
    breaks the run, as in the ledger), with no process on them and no memory held: the
    ledger's `allocated_idle` now, read from those minutes alone."""
    a = b - 60 * rules.idle_minutes
    idle = idle_reading(rules, "m.util_gpu_pct_max", "m.power_w_mean", "m.power_limit_w_mean")
    held = (
        "SELECT DISTINCT node_id, gpu FROM fleet_gpuallocation WHERE site_id = {site}"
        " AND ended IS NULL AND source = '{source}'"
    )
    return (
        f"SELECT m.node_id, m.gpu FROM {rollup_table('gpu', '1m')} m"
        f" JOIN ({held.format(site=int(site_id), source='scheduler')}) h"
        " ON h.node_id = m.node_id AND h.gpu = m.gpu"
        f" WHERE m.bucket >= {a} AND m.bucket < {b} AND NOT EXISTS (SELECT 1 FROM"
        f" ({held.format(site=int(site_id), source='process')}) p"
        " WHERE p.node_id = m.node_id AND p.gpu = m.gpu)"
        " GROUP BY m.node_id, m.gpu"
        f" HAVING COUNT(*) = {rules.idle_minutes}"
        f" AND SUM(CASE WHEN {idle} THEN 1 ELSE 0 END) = {rules.idle_minutes}"
        f" AND MAX(COALESCE(m.mem_used_mib_max, 0)) < {float(rules.held_memory_mib)!r}"
    )
