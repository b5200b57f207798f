"""Time partitions of the raw and rollup tables on PostgreSQL (SQLite: none, every call a no-op).

Each `fw_<kind>_raw` is range-partitioned on `ts` by the hour (or by the packed span's
width, `fleet.storage.raw_span`: a sealed raw partition is packed as a whole), each
`fw_<kind>_1m` on `bucket` by the day and each `fw_<kind>_1h` by the calendar month (UTC);
widths and their sizes are in docs/storage.md. Retention (`fleet.storage.retention`) then
drops whole partitions instead of deleting rows.

A row whose time has no partition is refused by the database ("no partition of relation …
found for row"), which ingest answers 503 (`dialect.failure_kind`) so the agent resends. So
partitions are made well ahead of time, by the migration, by every ingest child as it starts,
by the `fleet.partitions` task and by `manage.py partitions`:

- `CREATE TABLE … (LIKE parent INCLUDING DEFAULTS)` then `ALTER TABLE parent ATTACH PARTITION`:
  ATTACH takes SHARE UPDATE EXCLUSIVE on the parent, which does not conflict with the ROW
  EXCLUSIVE of an ingest commit. `CREATE TABLE … PARTITION OF` takes ACCESS EXCLUSIVE on the
  parent (checked on PostgreSQL 15: it waited behind an open insert, ATTACH did not), so it
  would stall ingest behind any long reader of the parent.
- No DEFAULT partition: it would forbid `DETACH PARTITION … CONCURRENTLY`, and would silently
  collect rows that belong to a partition not yet made.
- The parent's primary key and indexes are partitioned indexes: ATTACH creates them on the
  new, empty table (the primary key keeps `ON CONFLICT DO NOTHING` working for resends).

This module does not need Django: the ingest child (which does not start Django) runs it on
its own connection through a `Runner`; `django_runner` adapts a Django connection.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from fleet.storage import raw_span
from fleet.storage.schema import ENTITY_COLUMNS, raw_table, rollup_table

T = TypeVar("T")
Row = tuple[Any, ...]
Execute = Callable[..., list[Row]]  # (sql, params=()) -> rows, inside one transaction

KINDS = tuple(ENTITY_COLUMNS)
PARTITIONED_TIERS = ("raw", "1m", "1h")

# Width of one partition per tier (1h: a calendar month, handled apart; raw: the packed
# span, `raw_span.span_s()`, an hour by default). Sized in docs/storage.md: at 10,000 GPUs
# a raw hour is 36 M rows (~9 GB on PostgreSQL).
WIDTH_S = {"raw": 3600, "1m": 86400}

# Partitions made past the one holding `now`: raw a day's worth (so a beat outage of hours
# never stops ingest; counted in hours whatever the raw width), 1m three days, 1h two
# months. Rollups write only complete buckets (in the past), so their tiers need little.
AHEAD = {"raw": 24, "1m": 3, "1h": 2}


def width_s(tier: str) -> int:
    """Seconds per partition of `tier` (not 1h: calendar months)."""
    return raw_span.span_s() if tier == "raw" else WIDTH_S[tier]


def ahead_count(tier: str) -> int:
    """How many partitions of `tier` are made past the one holding now."""
    if tier == "raw":
        return AHEAD["raw"] * 3600 // width_s("raw")
    return AHEAD[tier]


# Serialises concurrent ensures (beat task, an ingest child starting, the command):
# each re-checks inside it, so two never try to attach the same slot.
ADVISORY_LOCK_KEY = 0x66770001

LEGACY_SUFFIX = "_legacy"

MINVALUE = float("-inf")
MAXVALUE = float("inf")


class Runner(Protocol):
    """Runs `work` in one transaction of its own and commits."""

    def __call__(self, work: Callable[[Execute], T]) -> T: ...


@dataclass(frozen=True, slots=True)
class Family:
    """One partitioned table: which kind, which tier, and its partition key."""

    kind: str
    tier: str  # "raw", "1m" or "1h"

    @property
    def table(self) -> str:
        return raw_table(self.kind) if self.tier == "raw" else rollup_table(self.kind, self.tier)

    @property
    def column(self) -> str:
        return "ts" if self.tier == "raw" else "bucket"


@dataclass(frozen=True, slots=True)
class Partition:
    parent: str
    name: str
    lo: float  # MINVALUE for the legacy partition of a migrated installation
    hi: float
    detach_pending: bool = False


def families(tiers: Iterable[str] = PARTITIONED_TIERS) -> list[Family]:
    return [Family(kind, tier) for tier in tiers for kind in KINDS]


def _month_start(year: int, month: int) -> int:
    return int(datetime(year, month, 1, tzinfo=UTC).timestamp())


def slot(tier: str, t: float) -> tuple[int, int]:
    """[lo, hi) of the partition of `tier` that holds time `t`."""
    if tier == "1h":
        day = datetime.fromtimestamp(t, UTC)
        nxt = (day.year + 1, 1) if day.month == 12 else (day.year, day.month + 1)
        return _month_start(day.year, day.month), _month_start(*nxt)
    width = width_s(tier)
    lo = int(t // width) * width
    return lo, lo + width


def slots(tier: str, start: float, end: float) -> list[tuple[int, int]]:
    """Every partition slot of `tier` that overlaps [start, end)."""
    out: list[tuple[int, int]] = []
    lo, hi = slot(tier, start)
    while lo < end:
        out.append((lo, hi))
        lo, hi = slot(tier, hi)
    return out


def partition_name(family: Family, lo: int) -> str:
    """e.g. fw_gpu_raw_p20261201t14 (fw_gpu_raw_p20261201t1405 when raw partitions are
    narrower than an hour), fw_gpu_1m_p20261201, fw_gpu_1h_p202612."""
    fmt = {"raw": "%Y%m%dt%H", "1m": "%Y%m%d", "1h": "%Y%m"}[family.tier]
    if family.tier == "raw" and width_s("raw") < 3600:
        fmt += "%M"
    return f"{family.table}_p{datetime.fromtimestamp(lo, UTC).strftime(fmt)}"


def legacy_name(table: str) -> str:
    return table + LEGACY_SUFFIX


# -- reading what exists ---------------------------------------------------------------

_BOUND = re.compile(r"FROM \((.+?)\) TO \((.+?)\)")


def _bound(text: str) -> float:
    text = text.strip().strip("'")
    if text == "MINVALUE":
        return MINVALUE
    if text == "MAXVALUE":
        return MAXVALUE
    return float(text)


def parse_bounds(expr: str) -> tuple[float, float]:
    """`FOR VALUES FROM ('1') TO ('2')` (as pg_get_expr prints it) -> (1.0, 2.0)."""
    match = _BOUND.search(expr)
    if match is None:
        raise ValueError(f"not a range partition bound: {expr!r}")
    return _bound(match.group(1)), _bound(match.group(2))


def partitioned_parents(execute: Execute, tables: Sequence[str]) -> set[str]:
    """Which of `tables` are partitioned (an installation before migration 0016 has none)."""
    rows = execute(
        "SELECT relname FROM pg_class WHERE relkind = 'p' AND relname = ANY(%s)"
        " AND pg_table_is_visible(oid)",
        [list(tables)],
    )
    return {str(r[0]) for r in rows}


def list_partitions(execute: Execute, tables: Sequence[str]) -> dict[str, list[Partition]]:
    """The attached partitions of each parent in `tables`, oldest first."""
    rows = execute(
        "SELECT p.relname, c.relname, pg_get_expr(c.relpartbound, c.oid), i.inhdetachpending"
        " FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " JOIN pg_class p ON p.oid = i.inhparent"
        " WHERE p.relkind = 'p' AND p.relname = ANY(%s) AND pg_table_is_visible(p.oid)",
        [list(tables)],
    )
    out: dict[str, list[Partition]] = {t: [] for t in tables}
    for parent, name, expr, pending in rows:
        lo, hi = parse_bounds(str(expr))
        out[str(parent)].append(Partition(str(parent), str(name), lo, hi, bool(pending)))
    for parts in out.values():
        parts.sort(key=lambda p: p.lo)
    return out


# -- making them -----------------------------------------------------------------------


def attach_sql(parent: str, name: str, lo: float, hi: float) -> str:
    low = "MINVALUE" if lo == MINVALUE else str(int(lo))
    return f"ALTER TABLE {parent} ATTACH PARTITION {name} FOR VALUES FROM ({low}) TO ({int(hi)})"


def _missing(
    family: Family, existing: Sequence[Partition], start: float, end: float
) -> list[tuple[int, int]]:
    """Slots overlapping [start, end) that no attached partition overlaps."""
    return [
        (lo, hi)
        for lo, hi in slots(family.tier, start, end)
        if not any(p.lo < hi and lo < p.hi for p in existing)
    ]


def _create(execute: Execute, family: Family, wanted: Sequence[tuple[int, int]]) -> list[str]:
    """Create and attach `wanted` slots of one parent, in the caller's transaction."""
    execute("SELECT pg_advisory_xact_lock(%s)", [ADVISORY_LOCK_KEY])
    # ATTACH's own lock, taken first: the LIKE below would otherwise hold a weaker lock on
    # the parent while waiting for this one behind a DETACH … CONCURRENTLY that waits for
    # every transaction holding a lock on the parent (a deadlock, broken after 1 s).
    execute(f"LOCK TABLE {family.table} IN SHARE UPDATE EXCLUSIVE MODE")
    made: list[str] = []
    for lo, hi in wanted:
        name = partition_name(family, lo)
        if execute("SELECT to_regclass(%s)", [name])[0][0] is not None:
            continue  # another ensure made it meanwhile
        execute(f"CREATE TABLE {name} (LIKE {family.table} INCLUDING DEFAULTS)")
        execute(attach_sql(family.table, name, lo, hi))
        made.append(name)
    return made


# The BRIN indexes of one table (a raw partition's index on ts).
_BRIN_INDEXES = (
    "SELECT i.indexrelid::regclass::text FROM pg_index i"
    " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
    " WHERE i.indrelid = to_regclass(%s) AND a.amname = 'brin'"
)


def summarize_new_pages(execute: Execute, kind: str, start: float, end: float) -> int:
    """PostgreSQL: summarise the BRIN ranges on `ts` of the raw partitions overlapping
    [start, end) that were filled since their last summary. Returns ranges summarised.

    A BRIN index leaves pages appended since the last VACUUM unsummarised (unless
    autosummarize asks autovacuum for it, which may be off or behind), and a scan must
    read every unsummarised page: the rollup's minute read of the live hour partition then
    grows through the hour (measured at 10,000 GPUs: ticks of 9 s rising to 25 s; one
    summary cut that scan 6.6x). Summarising costs reading the new pages once, which the
    rollup is about to do anyway. Takes only SHARE UPDATE EXCLUSIVE on the partition,
    which inserts do not wait for."""
    summarised = 0
    family = Family(kind, "raw")
    for lo, _ in slots("raw", start, end):
        for (index,) in execute(_BRIN_INDEXES, [partition_name(family, lo)]):
            row = execute("SELECT brin_summarize_new_values(%s::regclass)", [index])[0]
            summarised += int(row[0])
    return summarised


def ensure_between(
    run: Runner, spans: Mapping[Family, tuple[float, float]], vendor: str = "postgresql"
) -> list[str]:
    """Make every missing partition of each family over its [start, end). Returns the names made.

    One transaction per parent: its ATTACHes hold the parent's SHARE UPDATE EXCLUSIVE lock
    until the commit, which ingest's inserts do not wait for."""
    if vendor != "postgresql" or not spans:
        return []
    tables = [f.table for f in spans]
    parents, existing = run(
        lambda ex: (partitioned_parents(ex, tables), list_partitions(ex, tables))
    )
    made: list[str] = []
    for family, (start, end) in spans.items():
        if family.table not in parents:
            continue
        wanted = _missing(family, existing[family.table], start, end)
        if wanted:
            made += run(functools.partial(_create, family=family, wanted=wanted))
    return made


def ahead_spans(
    now: float, behind_s: Mapping[Family, float], tiers: Iterable[str] = PARTITIONED_TIERS
) -> dict[Family, tuple[float, float]]:
    """For each family: from `now - behind_s` (0 if not given) to AHEAD partitions past now."""
    spans: dict[Family, tuple[float, float]] = {}
    for family in families(tiers):
        _, end = slot(family.tier, now)
        for _ in range(ahead_count(family.tier)):
            _, end = slot(family.tier, end)
        spans[family] = (now - behind_s.get(family, 0.0), end)
    return spans


def database_runner(db: Any) -> Runner:
    """A Runner on a `fleet.storage.db.Database` (the ingest child's own connection)."""

    def run(work: Callable[[Execute], T]) -> T:
        return db.transaction(lambda tx: work(tx.execute))  # type: ignore[no-any-return]

    return run


def ensure_raw_ahead(db: Any, now: float) -> list[str]:
    """What an ingest child makes as it starts: raw partitions from the current hour to
    AHEAD hours past it. (It has no Django settings; the older hours of the raw horizon are
    the migration's and the `fleet.partitions` task's.)"""
    spans = ahead_spans(now, {}, tiers=("raw",))
    return ensure_between(database_runner(db), spans, db.vendor)


# -- through Django (the migration, the task, the command, retention) -------------------


def django_runner(using: str) -> Runner:
    """A Runner on a Django connection (inside a migration: a savepoint of its transaction)."""
    from django.db import connections, transaction

    def run(work: Callable[[Execute], T]) -> T:
        with transaction.atomic(using=using), connections[using].cursor() as cur:

            def execute(sql: str, params: Sequence[Any] = ()) -> list[Row]:
                cur.execute(sql, params)
                return list(cur.fetchall()) if cur.description else []

            return work(execute)

    return run


def ensure_partitions(now: float, using: str = "default") -> list[str]:
    """Every partitioned table covered from its retention horizon (what may still be
    written or kept there) to AHEAD partitions past `now`. Idempotent; returns names made."""
    from django.db import connections

    from fleet.storage.retention import kept_s

    vendor = connections[using].vendor
    behind = {f: kept_s(f.tier, f.kind) for f in families()}
    return ensure_between(django_runner(using), ahead_spans(now, behind), vendor)


def describe(using: str = "default") -> list[tuple[str, str, float, float, int, int]]:
    """(parent, partition, lo, hi, estimated rows, bytes incl. indexes) of every partition;
    rows are -1 until the partition was first analysed."""
    from django.db import connections

    if connections[using].vendor != "postgresql":
        return []
    tables = [f.table for f in families()]

    def read(execute: Execute) -> list[tuple[str, str, float, float, int, int]]:
        out: list[tuple[str, str, float, float, int, int]] = []
        for parent, parts in list_partitions(execute, tables).items():
            for p in parts:
                rows, size = execute(
                    "SELECT reltuples::bigint, pg_total_relation_size(oid)"
                    " FROM pg_class WHERE oid = to_regclass(%s)",
                    [p.name],
                )[0]
                out.append((parent, p.name, p.lo, p.hi, int(rows), int(size)))
        return out

    return django_runner(using)(read)
