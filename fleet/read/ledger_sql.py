"""The energy ledger as set-based SQL, one statement shape for SQLite and PostgreSQL.

`ledger_cte` builds a `WITH` clause whose last table, `led`, has one row per GPU and bucket
of the window (a minute of the 1m tier, an hour of the 1h tier): its state, its holders,
its own energy, its share of the node's non-GPU energy and its facility overhead.
`per_holder_sql` folds `led` in the database to a few rows per hour, GPU, holder and state;
fleet/read/ledger.py folds those for a window, fleet/storage/ledger.py keeps them per
hour and day.

Every value put into the SQL text is an int (ids, epoch seconds) or a float from
`LedgerRules`: nothing a user typed, so nothing is bound. docs/ledger.md says what each
column means; tests/fleet/test_ledger.py holds it to a Python fold of the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fleet.read import ledger_rules as r
from fleet.read.ledger_rules import LedgerRules
from fleet.storage.schema import TIER_SECONDS, rollup_table
from fleet.storage.workloads import SHARE_TABLE


@dataclass(frozen=True, slots=True)
class Window:
    """What a ledger covers: a site's GPUs (or some of its nodes) over [a, b) of a tier;
    `a` and `b` on the tier's bucket boundaries."""

    site_id: int
    a: int
    b: int
    tier: str = "1m"
    node_ids: tuple[int, ...] | None = None

    @property
    def step(self) -> int:
        return TIER_SECONDS[self.tier]


def _f(value: float) -> str:
    return repr(float(value))


def _nodes(w: Window) -> str:
    """The site's nodes (or the chosen ones among them)."""
    chosen = ""
    if w.node_ids is not None:
        chosen = " AND n.id IN (" + (", ".join(str(int(i)) for i in w.node_ids) or "NULL") + ")"
    return (
        "SELECT n.id FROM fleet_node n JOIN fleet_rack k ON k.id = n.rack_id"
        f" JOIN fleet_hall h ON h.id = k.hall_id WHERE h.site_id = {int(w.site_id)}{chosen}"
    )


def _gpu_rows(w: Window, rules: LedgerRules) -> str:
    """The GPU rows around the window, each with the counter's previous reading: from one
    bucket before the lookback (the first counted bucket needs its predecessor) to the
    lookback past the window's end."""
    lo, hi = w.a - rules.lookback_s - w.step, w.b + rules.lookback_s
    return (
        "SELECT node_id, gpu, bucket, util_gpu_pct_mean AS util, util_gpu_pct_max AS util_max,"
        " power_w_mean AS power, power_w_min AS pmin, power_limit_w_mean AS plimit,"
        " mem_used_mib_max AS mem,"
        " energy_j_last AS e, LAG(energy_j_last) OVER w AS e_prev, LAG(bucket) OVER w AS b_prev"
        f" FROM {rollup_table('gpu', w.tier)}"
        f" WHERE node_id IN (SELECT id FROM nodes) AND bucket >= {lo} AND bucket < {hi}"
        " WINDOW w AS (PARTITION BY node_id, gpu ORDER BY bucket)"
    )


def _energy(w: Window) -> str:
    """Each bucket's GPU energy (J): the counter's increase since the previous bucket when
    both carry it; a decrease is a driver reload, the counter restarted from zero, so its
    value is what was used since. Otherwise mean power × the bucket, flagged estimated."""
    counted = f"e IS NOT NULL AND e_prev IS NOT NULL AND b_prev = bucket - {w.step}"
    return (
        "SELECT node_id, gpu, bucket, util, util_max, power, pmin, plimit, mem,"
        f" CASE WHEN {counted} THEN (CASE WHEN e < e_prev THEN e ELSE e - e_prev END)"
        f" WHEN power IS NOT NULL THEN power * {w.step} ELSE 0 END AS gpu_e,"
        f" CASE WHEN NOT ({counted}) AND power IS NOT NULL THEN 1 ELSE 0 END AS estimated,"
        f" CASE WHEN {counted} AND e < e_prev THEN 1 ELSE 0 END AS reset"
        " FROM g"
    )


def _allocations(w: Window, rules: LedgerRules) -> str:
    """Intervals overlapping the rows read (docs/storage.md, Workload intervals)."""
    lo, hi = w.a - rules.lookback_s - w.step, w.b + rules.lookback_s
    return (
        "SELECT node_id, gpu, workload_id, source, started, last_seen, ended"
        f" FROM fleet_gpuallocation WHERE site_id = {int(w.site_id)} AND started < {hi}"
        f" AND (ended IS NULL OR ended >= {lo}) AND COALESCE(ended, last_seen) >= {lo}"
    )


def _overlaps(w: Window, bucket: str) -> str:
    """Interval `al` overlaps the bucket starting at `bucket`: an open interval is known
    until its `last_seen`; a closed one ends at `ended`, the first snapshot without it."""
    return (
        f"al.started < {bucket} + {w.step}"
        f" AND ((al.ended IS NULL AND al.last_seen >= {bucket}) OR al.ended > {bucket})"
    )


def _coverage(w: Window, bucket: str) -> str:
    """The part of the bucket starting at `bucket` that interval `al` covers, 0–1: from its
    start (or the bucket's) to its end (or the bucket's; an open one runs to the bucket's
    end). A job that starts or ends inside a bucket is charged only its part of it."""
    start = f"CASE WHEN al.started > {bucket} THEN al.started ELSE {bucket} END"
    end = (
        f"CASE WHEN al.ended IS NOT NULL AND al.ended < {bucket} + {w.step} THEN al.ended"
        f" ELSE {bucket} + {w.step} END"
    )
    return f"(({end}) - ({start})) / {float(w.step)!r}"


# Added to a part's `holders` where the GPU's energy was split by SM activity in one of its
# buckets: the stored hours keep "most holders" as MAX(holders), which keeps this flag too.
SM_SPLIT = 1 << 16


def shares_sql(w: Window, rules: LedgerRules) -> str:
    """One row if a GPU of the window's nodes has SM activity kept around it (a range probe:
    the key leads with the minute), else none, and then the ledger reads no share table: a
    fleet of exclusive GPUs runs the statement it ran before. For the 1-minute tier only:
    the table is kept as long as the minutes, the hourly tier serves older windows."""
    lo, hi = w.a - rules.lookback_s - w.step, w.b + rules.lookback_s
    return (
        f"WITH nodes AS ({_nodes(w)}) SELECT 1 FROM {SHARE_TABLE}"
        f" WHERE bucket >= {lo} AND bucket < {hi} AND node_id IN (SELECT id FROM nodes) LIMIT 1"
    )


def _shares(sm: bool, alias: str, bucket: str, workload: str) -> str:
    """`LEFT JOIN` of the SM activity of `workload` on the GPU of `alias` in `bucket` (the
    share table's whole key: one row or none), as `alias`s; nothing unless `sm`."""
    if not sm:
        return ""
    return (
        f" LEFT JOIN {SHARE_TABLE} {alias}s ON {alias}s.bucket = {bucket}"
        f" AND {alias}s.node_id = {alias}.node_id AND {alias}s.gpu = {alias}.gpu"
        f" AND {alias}s.workload_id = {workload}"
    )


def _holding(w: Window, sm: bool) -> str:
    """Each interval on each GPU in each bucket it overlaps, how much of it it covers, and
    (`sm`) its workload's SM activity there (NULL: none kept)."""
    return (
        "SELECT m.node_id, m.gpu, m.bucket, al.workload_id, al.source,"
        f" {_coverage(w, 'm.bucket')} AS cov{', ms.sm_sum AS sm' if sm else ''} FROM g m"
        f" JOIN al ON al.node_id = m.node_id AND al.gpu = m.gpu AND {_overlaps(w, 'm.bucket')}"
        + _shares(sm, "m", "m.bucket", "al.workload_id")
    )


# The scheduler's allocation owns a GPU; a process owns it only where no allocation names
# it (a bare node, a user's job). A pod's allocation and its processes are two workloads
# (keyed by name and by UID): counting both would halve the pod's energy. `holders`: the
# owning intervals, so a job on two MIG devices of a GPU counts twice; `covered`: the parts
# of the bucket they cover, summed (below 1: the rest of the bucket nobody held); `smn`: the
# owning intervals whose workload has SM activity kept, `smt` their activity summed.
_HOLDER_SUMMARY = (
    "SELECT node_id, gpu, bucket, SUM(CASE WHEN source = 'scheduler' THEN 1 ELSE 0 END) AS sched,"
    " CASE WHEN SUM(CASE WHEN source = 'scheduler' THEN 1 ELSE 0 END) > 0"
    " THEN SUM(CASE WHEN source = 'scheduler' THEN 1 ELSE 0 END) ELSE COUNT(*) END AS holders,"
    " CASE WHEN SUM(CASE WHEN source = 'scheduler' THEN 1 ELSE 0 END) > 0"
    " THEN SUM(CASE WHEN source = 'scheduler' THEN cov ELSE 0 END) ELSE SUM(cov) END AS covered,"
    " {sm},"
    " COUNT(DISTINCT CASE WHEN source = 'process' THEN workload_id END) AS procs"
    " FROM hx GROUP BY node_id, gpu, bucket"
)
_SM_SUMMARY = (
    "CASE WHEN SUM(CASE WHEN source = 'scheduler' THEN 1 ELSE 0 END) > 0 THEN SUM(CASE WHEN"
    " source = 'scheduler' AND sm IS NOT NULL THEN 1 ELSE 0 END) ELSE COUNT(sm) END AS smn,"
    " CASE WHEN SUM(CASE WHEN source = 'scheduler' THEN 1 ELSE 0 END) > 0"
    " THEN SUM(CASE WHEN source = 'scheduler' THEN sm END) ELSE SUM(sm) END AS smt"
)
_NO_SM_SUMMARY = "0 AS smn, 0 AS smt"


def idle_reading(rules: LedgerRules, util_max: str, power: str, limit: str) -> str:
    """The SQL test of one bucket's reading for idle: its highest utilisation under
    `idle_util_pct`, its mean power at most `idle_power_fraction` of the limit (`idle_power_w`
    without one). A limit of 0 W is no limit known, as for the alert's test
    (fleet/alerts/holders.is_idle; tests/alerts/test_idle_agreement.py holds them alike)."""
    known = f"NULLIF({limit}, 0)"
    idle_w = f"COALESCE({known} * {_f(rules.idle_power_fraction)}, {_f(rules.idle_power_w)})"
    return f"{util_max} < {_f(rules.idle_util_pct)} AND {power} <= {idle_w}"


def _flags(rules: LedgerRules) -> str:
    """Per bucket: is it idle, is it stalled (before the run-length rule)."""
    limit = "NULLIF(e.plimit, 0)"
    stall_w = f"COALESCE({limit} * {_f(rules.stall_power_fraction)}, {_f(rules.stall_power_w)})"
    idle = idle_reading(rules, "e.util_max", "e.power", "e.plimit")
    return (
        "SELECT e.*, COALESCE(hs.holders, 0) AS holders, COALESCE(hs.sched, 0) AS sched,"
        " COALESCE(hs.covered, 0) AS covered,"
        " COALESCE(hs.procs, 0) AS procs, COALESCE(hs.smn, 0) AS smn, hs.smt AS smt,"
        f" CASE WHEN hs.holders IS NOT NULL AND {idle} THEN 1 ELSE 0 END AS idle,"
        f" CASE WHEN hs.holders IS NOT NULL AND e.util >= {_f(rules.stall_util_pct)}"
        f" AND e.power <= {stall_w} THEN 1 ELSE 0 END AS stall"
        " FROM e LEFT JOIN hs ON hs.node_id = e.node_id AND hs.gpu = e.gpu AND hs.bucket = e.bucket"
    )


def _runs_matter(w: Window, rules: LedgerRules) -> bool:
    """Whether a run can be shorter than the rule asks: not when one bucket (an hour) is
    already as long as both run lengths, so the hourly tier skips four window passes."""
    return w.step < 60 * max(rules.idle_minutes, rules.stall_minutes)


def _runs(w: Window) -> str:
    """Gaps and islands: consecutive buckets with the same flag share `bucket − step × their
    rank`; a missing bucket breaks the run."""
    rank = "ROW_NUMBER() OVER (PARTITION BY node_id, gpu, {0} ORDER BY bucket)"
    return (
        f"SELECT f.*, bucket - {w.step} * {rank.format('idle')} AS idle_run,"
        f" bucket - {w.step} * {rank.format('stall')} AS stall_run FROM f"
    )


def _states(w: Window, rules: LedgerRules) -> str:
    if _runs_matter(w, rules):
        length = "COUNT(*) OVER (PARTITION BY node_id, gpu, {0}, {0}_run) * " + str(w.step)
        source = (
            f"(SELECT x.*, {length.format('idle')} AS idle_s, {length.format('stall')} AS stall_s"
            " FROM x)"
        )
    else:
        source = f"(SELECT f.*, {w.step} AS idle_s, {w.step} AS stall_s FROM f)"
    return (
        "SELECT node_id, gpu, bucket, holders, sched, covered, smn, smt, gpu_e, power, pmin,"
        " estimated, reset,"
        f" CASE WHEN util IS NULL AND power IS NULL THEN '{r.LOST}'"
        f" WHEN holders = 0 THEN '{r.UNALLOCATED}'"
        f" WHEN stall = 1 AND stall_s >= {60 * rules.stall_minutes} THEN '{r.STALLED}'"
        f" WHEN idle = 1 AND idle_s >= {60 * rules.idle_minutes} THEN CASE WHEN procs > 0"
        f" OR mem >= {_f(rules.held_memory_mib)} THEN '{r.IDLE_HELD_MEMORY}'"
        f" ELSE '{r.ALLOCATED_IDLE}' END ELSE '{r.BUSY}' END AS state"
        f" FROM {source} c WHERE bucket >= {w.a} AND bucket < {w.b}"
    )


def _node_totals() -> str:
    """Per bucket, its node's GPUs that have a row and their power: a window over `st`, not
    a join (two derived tables joined have no index to use)."""
    return (
        "SELECT st.*, COUNT(*) OVER (PARTITION BY node_id, bucket) AS ngpus,"
        " SUM(COALESCE(power, 0)) OVER (PARTITION BY node_id, bucket) AS gpower FROM st"
    )


def _pue_parts(w: Window) -> tuple[tuple[str, str], ...]:
    """`ph`: each hour's PUE from the hourly rollup; `pm` (minutes only): each minute's, for
    an hour not rolled up yet. Computed once per hour or minute and joined by equality, not
    looked up per GPU-bucket (PostgreSQL, expecting a few rows, re-scanned the facility
    rows for each of 737,280)."""
    site, hour = int(w.site_id), w.a - w.a % 3600
    ratio = "CASE WHEN it_power_w_mean > 0 THEN total_power_w_mean / it_power_w_mean END"
    hourly = (
        f"SELECT bucket AS hour, {ratio} AS pue FROM {rollup_table('facility', '1h')}"
        f" WHERE site_id = {site} AND bucket >= {hour} AND bucket < {w.b}"
    )
    if w.tier == "1h":
        return (("ph", hourly),)
    own = (
        f"SELECT bucket, {ratio} AS pue FROM {rollup_table('facility', w.tier)}"
        f" WHERE site_id = {site} AND bucket >= {w.a} AND bucket < {w.b}"
    )
    return (("ph", hourly), ("pm", own))


def _pue_of(w: Window, alias: str) -> tuple[str, str]:
    """The joins to `ph` (and `pm`) for the bucket `alias`.bucket, and its PUE: the hour's,
    else (an hour not rolled up yet) the bucket's own; NULL without both meters. On the
    hourly tier the two are the same row."""
    joins = f" LEFT JOIN ph ON ph.hour = {alias}.bucket - {alias}.bucket % 3600"
    if w.tier == "1h":
        return joins, "ph.pue"
    return joins + f" LEFT JOIN pm ON pm.bucket = {alias}.bucket", "COALESCE(ph.pue, pm.pue)"


def _ledger(w: Window) -> str:
    """One row per GPU and bucket: energies in J. The GPU's share of its node's non-GPU
    energy: node power minus its GPUs' power, never below zero, split evenly over the GPUs
    that have a row. `over`: the facility overhead on its IT energy, (PUE − 1) × (GPU +
    node share), 0 in an hour with no PUE (or one below 1); `pue_x` that factor. `rest_e`:
    of a held bucket's GPU energy, what the part no interval covers drew (a job began or
    ended inside it): that part's seconds at the bucket's lowest power (the GPU idling before
    the job or after it), never more than the bucket's energy. `sm_total`: where two or more
    intervals own the bucket and every one's workload has SM activity kept (some of it
    above 0), that activity summed, by which they split the GPU's energy; else 0 (by time)."""
    share = (
        f"CASE WHEN nr.power_w_mean > t.gpower THEN (nr.power_w_mean - t.gpower) * {w.step}"
        " / t.ngpus ELSE 0 END"
    )
    joins, pue = _pue_of(w, "t")
    idle_part = f"(1 - t.covered) * {w.step} * COALESCE(t.pmin, t.gpu_e / {w.step})"
    rest = (
        f"CASE WHEN t.holders > 0 AND t.covered < {_f(1 - _COVERED_EPS)} THEN CASE WHEN"
        f" {idle_part} < t.gpu_e THEN {idle_part} ELSE t.gpu_e END ELSE 0 END"
    )
    by_sm = "t.holders >= 2 AND t.smn = t.holders AND t.smt > 0"
    return (
        "SELECT t.node_id, t.gpu, t.bucket, t.state, t.holders, t.sched, t.covered, t.gpu_e,"
        f" {share} AS node_e, {rest} AS rest_e,"
        f" CASE WHEN {by_sm} THEN t.smt ELSE 0 END AS sm_total,"
        f" t.estimated, t.reset, CASE WHEN {pue} > 1 THEN (t.gpu_e + {share}) * ({pue} - 1)"
        f" ELSE 0 END AS over, CASE WHEN {pue} > 1 THEN {pue} - 1 ELSE 0 END AS pue_x,"
        f" CASE WHEN {pue} IS NULL THEN 0 ELSE 1 END AS has_pue FROM t"
        f" LEFT JOIN {rollup_table('node', w.tier)} nr ON nr.node_id = t.node_id"
        " AND nr.bucket = t.bucket" + joins
    )


# Read by more than one later step: computed once, not inlined into each (SQLite re-ran
# the window functions per use). PostgreSQL 12+ and SQLite 3.35+ know the hint.
_SHARED = frozenset({"nodes", "g", "al", "hx", "hs", "led"})
# The PUE per hour (and minute): PostgreSQL, expecting a few GPU-buckets where there are
# 737,280, looked each one's facility rows up by re-scanning them all (80 of 85 s) unless
# they are a table of their own, which it hashes; SQLite gives such a table no index and
# scans it per GPU-bucket (5 s → 23 s), so there they are inlined: a primary-key lookup.
_OWN_TABLE_ON_POSTGRESQL = frozenset({"ph", "pm"})
# The holders per GPU-bucket: PostgreSQL, expecting one row from a materialized `hs`,
# joined it to every GPU-bucket by a nested loop (4.6 s for an hourly chunk of 256 GPUs ×
# 48 h, 130 M rows compared); inlined it plans a hash join (0.16 s).
_INLINE_ON_POSTGRESQL = frozenset({"hx", "hs"})


def _with(parts: Sequence[tuple[str, str]], vendor: str) -> str:
    """`name AS [MATERIALIZED] (sql), …` for Django's `vendor` ("sqlite", "postgresql")."""

    def hint(name: str) -> str:
        postgresql = vendor == "postgresql"
        if postgresql and name in _INLINE_ON_POSTGRESQL:
            return ""
        own = postgresql and name in _OWN_TABLE_ON_POSTGRESQL
        return "MATERIALIZED " if name in _SHARED or own else ""

    return ", ".join(f"{name} AS {hint(name)}({sql})" for name, sql in parts)


def ledger_cte(w: Window, rules: LedgerRules, vendor: str, sm: bool = False) -> str:
    """`WITH …` ending in `led` (and `al`, the intervals around the window); `sm`: read
    the SM activity of shared GPUs (`shares_sql` found some)."""
    parts: Sequence[tuple[str, str]] = (
        ("nodes", _nodes(w)),
        ("g", _gpu_rows(w, rules)),
        ("e", _energy(w)),
        ("al", _allocations(w, rules)),
        ("hx", _holding(w, sm)),
        ("hs", _HOLDER_SUMMARY.replace("{sm}", _SM_SUMMARY if sm else _NO_SM_SUMMARY)),
        ("f", _flags(rules)),
        *((("x", _runs(w)),) if _runs_matter(w, rules) else ()),
        ("st", _states(w, rules)),
        ("t", _node_totals()),
        *_pue_parts(w),
        ("led", _ledger(w)),
    )
    return "WITH " + _with(parts, vendor)


def per_holder_sql(w: Window, rules: LedgerRules, vendor: str, sm: bool = False) -> str:
    """hour, node, GPU, workload (0: nobody), state, GPU-buckets, GPU J, node-share J,
    overhead J, estimated buckets, counter resets, buckets without a PUE, most holders at
    once (+ `SM_SPLIT` where split by SM activity). A holder's share of a bucket's time is
    the part of it its interval covers, scaled down where the owning intervals together
    cover more than the bucket (n jobs on one GPU at once: 1/n each); the part nobody
    covered is the pool's (`unallocated`), with the energy the GPU drew in it (`rest_e`);
    the holders share the rest of the GPU's energy by the parts they cover, or by their SM
    activity where `led.sm_total` says so (`sm`: only where `shares_sql` finds some; else
    no share table is read); the node's share by time, and the overhead follows both. A
    GPU's rows still add up to its buckets and its energy. One statement serves the per-GPU,
    per-job and per-state ledgers and the stored hours. Joined to the intervals themselves
    (indexed by node and GPU), not to a derived table of holders: SQLite gives a derived
    table no index."""
    cov = _coverage(w, "led.bucket")
    scale = "CASE WHEN led.covered > 1 THEN led.covered ELSE 1 END"
    nobody = "al.workload_id IS NULL"
    sh = f"CASE WHEN {nobody} THEN 1.0 ELSE {cov} / {scale} END"
    by_sm = ""  # without SM activity `led.sm_total` is 0
    if sm:
        by_sm = " WHEN led.sm_total > 0 THEN (led.gpu_e - led.rest_e) * leds.sm_sum / led.sm_total"
    ge = (
        f"CASE WHEN {nobody} THEN led.gpu_e{by_sm}"
        f" ELSE (led.gpu_e - led.rest_e) * {cov} / led.covered END"
    )
    ne = f"led.node_e * ({sh})"
    held = (
        f"SELECT led.bucket, led.node_id, led.gpu, COALESCE(al.workload_id, 0) AS wl, led.state,"
        f" {sh} AS sh, {ge} AS ge, {ne} AS ne, ({ge} + {ne}) * led.pue_x AS oe,"
        f" led.estimated * ({sh}) AS est, led.reset * ({sh}) AS rs,"
        f" (1 - led.has_pue) * ({sh}) AS np,"
        f" led.holders + CASE WHEN led.sm_total > 0 THEN {SM_SPLIT} ELSE 0 END AS holders"
        " FROM led LEFT JOIN al ON led.holders > 0 AND al.node_id = led.node_id"
        f" AND al.gpu = led.gpu AND {_overlaps(w, 'led.bucket')}"
        " AND (al.source = 'scheduler' OR led.sched = 0)"
        + _shares(sm, "led", "led.bucket", "al.workload_id")
    )
    # the part of a held bucket no interval covered (a job began or ended inside it)
    rest = (
        f"SELECT bucket, node_id, gpu, 0, CASE WHEN state = '{r.LOST}' THEN '{r.LOST}'"
        f" ELSE '{r.UNALLOCATED}' END, 1.0 - covered, rest_e, node_e * (1.0 - covered),"
        " (rest_e + node_e * (1.0 - covered)) * pue_x, estimated * (1.0 - covered),"
        " reset * (1.0 - covered), (1 - has_pue) * (1.0 - covered), holders FROM led"
        f" WHERE holders > 0 AND covered < {_f(1 - _COVERED_EPS)}"
    )
    sums = ", ".join(f"SUM({col})" for col in ("sh", "ge", "ne", "oe", "est", "rs", "np"))
    hour = "bucket - bucket % 3600"
    return (
        f"{ledger_cte(w, rules, vendor, sm)}, sh AS ({held} UNION ALL {rest})"
        f" SELECT {hour} AS hour, node_id, gpu, wl, state, {sums}, MAX(holders)"
        f" FROM sh GROUP BY {hour}, node_id, gpu, wl, state"
    )


# Coverage sums are float arithmetic on seconds: a bucket covered to within this is whole.
_COVERED_EPS = 1e-9


def nodes_without_gpus_sql(w: Window, vendor: str) -> str:
    """Per hour and node: node energy (J) in buckets where none of the node's GPUs has a
    row, and its overhead: the pool's (nothing held can be charged for it)."""
    gpu_table, node_table = rollup_table("gpu", w.tier), rollup_table("node", w.tier)
    joins, pue = _pue_of(w, "nd")
    return (
        f"WITH nodes AS ({_nodes(w)}), {_with(_pue_parts(w), vendor)}"
        f" SELECT nd.bucket - nd.bucket % 3600, nd.node_id, SUM(nd.power_w_mean * {w.step}),"
        f" SUM(CASE WHEN {pue} > 1 THEN nd.power_w_mean * {w.step} * ({pue} - 1) ELSE 0 END)"
        f" FROM {node_table} nd{joins}"
        f" WHERE nd.node_id IN (SELECT id FROM nodes) AND nd.bucket >= {w.a}"
        f" AND nd.bucket < {w.b} AND nd.power_w_mean IS NOT NULL AND NOT EXISTS"
        f" (SELECT 1 FROM {gpu_table} gr WHERE gr.node_id = nd.node_id AND gr.bucket = nd.bucket)"
        " GROUP BY nd.bucket - nd.bucket % 3600, nd.node_id"
    )


def unmetered_it_sql(w: Window, vendor: str) -> str:
    """Per hour: the IT energy (J) the facility's IT meter saw beyond what the site's nodes
    report (network, storage, the racks' own fans and PDUs), never below zero per bucket,
    and its overhead: the pool's. A node with no power reading in a bucket counts its GPUs'
    power there, so what its GPUs are charged is not counted twice. Always the whole site:
    the meter does not know nodes."""
    site = Window(w.site_id, w.a, w.b, w.tier)
    node_table, gpu_table = rollup_table("node", w.tier), rollup_table("gpu", w.tier)
    span = f"bucket >= {w.a} AND bucket < {w.b}"
    joins, pue = _pue_of(w, "f")
    rest = "(f.it_power_w_mean - COALESCE(ns.w, 0))"
    return (
        f"WITH nodes AS ({_nodes(site)}), {_with(_pue_parts(w), vendor)},"
        f" nw AS (SELECT node_id, bucket, power_w_mean AS w FROM {node_table}"
        f" WHERE node_id IN (SELECT id FROM nodes) AND {span} AND power_w_mean IS NOT NULL),"
        f" gw AS (SELECT node_id, bucket, SUM(power_w_mean) AS w FROM {gpu_table} gr"
        f" WHERE node_id IN (SELECT id FROM nodes) AND {span} AND NOT EXISTS (SELECT 1 FROM nw"
        " WHERE nw.node_id = gr.node_id AND nw.bucket = gr.bucket) GROUP BY node_id, bucket),"
        " ns AS (SELECT bucket, SUM(w) AS w FROM (SELECT bucket, w FROM nw UNION ALL"
        " SELECT bucket, w FROM gw) x GROUP BY bucket)"
        f" SELECT f.bucket - f.bucket % 3600, SUM(CASE WHEN {rest} > 0 THEN {rest} * {w.step}"
        f" ELSE 0 END), SUM(CASE WHEN {rest} > 0 AND {pue} > 1 THEN {rest} * {w.step}"
        f" * ({pue} - 1) ELSE 0 END) FROM {rollup_table('facility', w.tier)} f"
        f" LEFT JOIN ns ON ns.bucket = f.bucket{joins} WHERE f.site_id = {int(w.site_id)}"
        f" AND f.bucket >= {w.a} AND f.bucket < {w.b} AND f.total_power_w_mean IS NOT NULL"
        " AND f.it_power_w_mean > 0 GROUP BY f.bucket - f.bucket % 3600"
    )


def metered_sql(w: Window) -> str:
    """The facility meters over the window: total J, IT J, buckets counted."""
    return (
        f"SELECT SUM(total_power_w_mean) * {w.step}, SUM(it_power_w_mean) * {w.step}, COUNT(*)"
        f" FROM {rollup_table('facility', w.tier)} WHERE site_id = {int(w.site_id)}"
        f" AND bucket >= {w.a} AND bucket < {w.b} AND total_power_w_mean IS NOT NULL"
        " AND it_power_w_mean > 0"
    )
