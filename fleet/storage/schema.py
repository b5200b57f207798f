"""DDL for the time-series tables, generated from a column list per sample kind.

Migrations call these functions with a *frozen* column list, so a later change
to the catalogue arrives as a new migration (add column), never by rewriting
history.

Key order is chosen per engine (measured: docs/reference/ingest-feasibility.md): on SQLite a
ts-first WITHOUT ROWID key keeps inserts append-only (node-first made it
I/O-bound at a fifth of the rate); PostgreSQL is fine node-first, which also
serves per-entity history reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fleet.storage.dialect import POSTGRESQL, number_type, ts_type

Columns = Sequence[tuple[str, bool]]  # (metric name, integer?)

# Entity key columns of each sample kind, as stored (names resolved to ids).
ENTITY_COLUMNS: dict[str, tuple[str, ...]] = {
    "gpu": ("node_id", "gpu"),
    "node": ("node_id",),
    "rack": ("rack_id",),
    "feed": ("feed_id",),
    "loop": ("loop_id",),
    "facility": ("site_id",),
}

TIERS = ("1m", "1h")
TIER_SECONDS = {"1m": 60, "1h": 3600}
ROLLUP_STATS = ("min", "mean", "max", "last")


def raw_table(kind: str) -> str:
    return f"fw_{kind}_raw"


def latest_table(kind: str) -> str:
    return f"fw_{kind}_latest"


def rollup_table(kind: str, tier: str) -> str:
    return f"fw_{kind}_{tier}"


def create_raw(kind: str, columns: Columns, vendor: str) -> list[str]:
    keys = ENTITY_COLUMNS[kind]
    cols = [f"ts {ts_type(vendor)} NOT NULL"] + [f"{k} INTEGER NOT NULL" for k in keys]
    cols += [f"{name} {number_type(integer, vendor)}" for name, integer in columns]
    if vendor == POSTGRESQL:
        pk = ", ".join((*keys, "ts"))
        return [f"CREATE TABLE {raw_table(kind)} ({', '.join(cols)}, PRIMARY KEY ({pk}))"]
    pk = ", ".join(("ts", *keys))
    return [f"CREATE TABLE {raw_table(kind)} ({', '.join(cols)}, PRIMARY KEY ({pk})) WITHOUT ROWID"]


def packed_table(kind: str) -> str:
    """Sealed spans of raw rows, one row per entity and span (fleet.storage.packed)."""
    return f"fw_{kind}_packed"


def create_packed(kind: str, vendor: str) -> list[str]:
    """One row per entity and sealed span [span_start, span_end): `n` samples, `data` their
    ts and metric columns as fleet.storage.packed_codec encodes them. PostgreSQL keeps
    `data` out of line uncompressed (STORAGE EXTERNAL): it is compressed already, and
    TOAST's own attempt would only cost CPU."""
    keys = ENTITY_COLUMNS[kind]
    table = packed_table(kind)
    blob = "BYTEA" if vendor == POSTGRESQL else "BLOB"
    cols = [f"{k} INTEGER NOT NULL" for k in keys]
    cols += ["span_start BIGINT NOT NULL", "span_end BIGINT NOT NULL", "n INTEGER NOT NULL"]
    cols.append(f"data {blob} NOT NULL")
    pk = ", ".join((*keys, "span_start"))
    statements = [
        f"CREATE TABLE {table} ({', '.join(cols)}, PRIMARY KEY ({pk}))",
        f"CREATE INDEX {table}_span ON {table} (span_start)",
    ]
    if vendor == POSTGRESQL:
        statements.append(f"ALTER TABLE {table} ALTER COLUMN data SET STORAGE EXTERNAL")
    return statements


def create_latest_v1(kind: str, columns: Columns, vendor: str) -> list[str]:
    """The first latest-state shape (one `ts` per row), kept for migration 0002."""
    keys = ENTITY_COLUMNS[kind]
    cols = [f"{k} INTEGER NOT NULL" for k in keys] + [f"ts {ts_type(vendor)} NOT NULL"]
    cols += [f"{name} {number_type(integer, vendor)}" for name, integer in columns]
    return [
        f"CREATE TABLE {latest_table(kind)} ({', '.join(cols)}, PRIMARY KEY ({', '.join(keys)}))"
    ]


def field_ts_column(metric: str) -> str:
    """The column holding when `metric`'s latest value was sampled."""
    return f"{metric}_ts"


def create_latest(kind: str, columns: Columns, vendor: str) -> list[str]:
    """Latest state, merged per field: each metric has its value and its own sample time,
    so a field whose reads stopped shows its age instead of looking fresh forever.
    `ts` is the newest of them (the entity's last data)."""
    keys = ENTITY_COLUMNS[kind]
    ts_col = ts_type(vendor)
    cols = [f"{k} INTEGER NOT NULL" for k in keys] + [f"ts {ts_col} NOT NULL"]
    for name, integer in columns:
        cols += [f"{name} {number_type(integer, vendor)}", f"{field_ts_column(name)} {ts_col}"]
    return [
        f"CREATE TABLE {latest_table(kind)} ({', '.join(cols)}, PRIMARY KEY ({', '.join(keys)}))"
    ]


def create_rollup(kind: str, tier: str, columns: Columns, vendor: str) -> list[str]:
    keys = ENTITY_COLUMNS[kind]
    cols = [f"{k} INTEGER NOT NULL" for k in keys] + [
        "bucket BIGINT NOT NULL",
        "n INTEGER NOT NULL",
    ]
    for name, integer in columns:
        # mean is never an integer; min/max/last keep the metric's type
        cols += [
            f"{name}_min {number_type(integer, vendor)}",
            f"{name}_mean {number_type(False, vendor)}",
            f"{name}_max {number_type(integer, vendor)}",
            f"{name}_last {number_type(integer, vendor)}",
        ]
    pk = ", ".join((*keys, "bucket"))
    table = rollup_table(kind, tier)
    return [
        f"CREATE TABLE {table} ({', '.join(cols)}, PRIMARY KEY ({pk}))",
        f"CREATE INDEX {table}_bucket ON {table} (bucket)",
    ]


def create_all(columns_by_kind: Mapping[str, Columns], vendor: str) -> list[str]:
    statements: list[str] = []
    for kind, columns in columns_by_kind.items():
        statements += create_raw(kind, columns, vendor)
        statements += create_latest_v1(kind, columns, vendor)
        for tier in TIERS:
            statements += create_rollup(kind, tier, columns, vendor)
    statements.append(
        "CREATE TABLE fw_rollup_state (tier VARCHAR(4) NOT NULL, kind VARCHAR(16) NOT NULL, "
        "done_until BIGINT NOT NULL, dirty_from BIGINT, PRIMARY KEY (tier, kind))"
    )
    return statements


def drop_all(kinds: Sequence[str]) -> list[str]:
    statements = ["DROP TABLE IF EXISTS fw_rollup_state"]
    for kind in kinds:
        statements.append(f"DROP TABLE IF EXISTS {raw_table(kind)}")
        statements.append(f"DROP TABLE IF EXISTS {latest_table(kind)}")
        for tier in TIERS:
            statements.append(f"DROP TABLE IF EXISTS {rollup_table(kind, tier)}")
    return statements


# -- PostgreSQL: time-partitioned raw and rollup tables (migration 0016) -----------------


def partition_column(tier: str) -> str:
    """Raw tables are partitioned on `ts`, rollup tables on `bucket`."""
    return "ts" if tier == "raw" else "bucket"


def create_partitioned_like(table: str, source: str, kind: str, tier: str) -> list[str]:
    """A range-partitioned `table` with `source`'s columns (LIKE: whatever columns later
    migrations added), its keys and indexes as partitioned indexes, which every attached
    partition then gets: raw PRIMARY KEY (entity…, ts) + BRIN on ts (migration 0004);
    rollups PRIMARY KEY (entity…, bucket) + an index on bucket."""
    column = partition_column(tier)
    return [
        f"CREATE TABLE {table} (LIKE {source} INCLUDING DEFAULTS) PARTITION BY RANGE ({column})",
        *time_table_keys(table, kind, tier),
    ]


def time_table_keys(table: str, kind: str, tier: str) -> list[str]:
    column = partition_column(tier)
    keys = ", ".join((*ENTITY_COLUMNS[kind], column))
    index = (
        f"CREATE INDEX {table}_ts ON {table} USING brin (ts)"
        if tier == "raw"
        else f"CREATE INDEX {table}_bucket ON {table} (bucket)"
    )
    return [f"ALTER TABLE {table} ADD PRIMARY KEY ({keys})", index]


def create_unpartitioned_like(table: str, source: str, kind: str, tier: str) -> list[str]:
    """The shape before 0016 (for rolling it back): a plain table with the same keys."""
    return [
        f"CREATE TABLE {table} (LIKE {source} INCLUDING DEFAULTS)",
        *time_table_keys(table, kind, tier),
    ]
