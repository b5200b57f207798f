"""Reading raw samples wherever they are: the raw table and the packed spans, as one.

A reader of raw rows (history's raw tier, the 1-minute rollup's recompute of late-marked
minutes) first stages the packed spans it needs: it decodes them into a per-connection
temporary table, `fw_<kind>_unpacked`, shaped like the raw table. Its SQL then reads
`source(kind)`: the staged rows, plus the raw table's rows that no staged row has (a
resend of a packed sample lands in the raw table with the same entity and time: the packed
one is the stored one, so it is counted once). When no packed span overlaps the read,
nothing is staged and the reader reads the raw table alone, as before packing existed.

Readers take no lock the packer waits for. A packer pass that commits between the
staging and the read (the span's rows moved from the raw table into a packed row) is
seen afterwards: `changed` compares the packed rows' (entity, span_start, n) read at
staging with what is there now, and the reader reads again.

The 1-minute rollup's range reads never need this: the packer only packs spans the rollup
has passed (fleet.storage.packed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.storage import packed
from fleet.storage.dialect import POSTGRESQL, number_type, ts_type
from fleet.storage.late import pick_table
from fleet.storage.schema import ENTITY_COLUMNS, packed_table, raw_table

# Packed rows staged per multi-row INSERT into the temp table: SQLite binds at most 32766
# parameters (35 columns a GPU row).
_ROWS_PER_INSERT = 500

# How often a read is redone after a packer pass moved its rows under it.
READ_ATTEMPTS = 3

Version = frozenset[tuple[tuple[int, ...], int, int]]  # (entity, span_start, n)


def unpacked_table(kind: str) -> str:
    return f"fw_{kind}_unpacked"


def source(kind: str) -> str:
    """A FROM item (parenthesised subquery) with the raw table's columns: staged packed
    rows, then raw rows no staged row has."""
    keys = ENTITY_COLUMNS[kind]
    columns = ", ".join((*keys, *packed.sample_columns(kind)))
    staged = unpacked_table(kind)
    same = " AND ".join(f"u.{c} = r.{c}" for c in (*keys, "ts"))
    return (
        f"(SELECT {columns} FROM {staged} UNION ALL SELECT {columns} FROM {raw_table(kind)} r"
        f" WHERE NOT EXISTS (SELECT 1 FROM {staged} u WHERE {same}))"
    )


@dataclass(frozen=True, slots=True)
class Staged:
    """What a staging put in the temp table: `any` rows at all, and the packed rows'
    version to check after the read."""

    any: bool
    version: Version


def stage_entity(cur: Any, kind: str, entity: Sequence[int], lo: float, hi: float) -> Staged:
    """Stage one entity's packed samples in [lo, hi)."""
    keys = ENTITY_COLUMNS[kind]
    match = " AND ".join(f"{k} = %s" for k in keys)
    cur.execute(
        f"SELECT span_start, n, data FROM {packed_table(kind)} WHERE {match}"
        " AND span_start < %s AND span_end > %s",
        [*entity, hi, lo],
    )
    found = cur.fetchall()
    key = tuple(int(v) for v in entity)
    version = frozenset((key, int(r[0]), int(r[1])) for r in found)
    rows = [(*key, *s) for r in found for s in packed.decode(kind, r[2]) if lo <= float(s[0]) < hi]
    return Staged(_stage(cur, kind, rows), version)


def entity_version(cur: Any, kind: str, entity: Sequence[int], lo: float, hi: float) -> Version:
    keys = ENTITY_COLUMNS[kind]
    match = " AND ".join(f"{k} = %s" for k in keys)
    cur.execute(
        f"SELECT span_start, n FROM {packed_table(kind)} WHERE {match}"
        " AND span_start < %s AND span_end > %s",
        [*entity, hi, lo],
    )
    key = tuple(int(v) for v in entity)
    return frozenset((key, int(r[0]), int(r[1])) for r in cur.fetchall())


def _picked_spans_sql(kind: str, columns: str) -> str:
    keys = ENTITY_COLUMNS[kind]
    same = " AND ".join(f"p.{k} = k.{k}" for k in keys)
    return (
        f"SELECT {columns} FROM {packed_table(kind)} k WHERE EXISTS (SELECT 1 FROM"
        f" {pick_table(kind)} p WHERE {same} AND p.bucket >= k.span_start"
        " AND p.bucket < k.span_end)"
    )


def stage_picked(cur: Any, kind: str, step: int) -> Staged:
    """Stage the packed samples of the (entity, bucket) pairs in the rollup's pick table
    (`late.stage_marks`), buckets `step` seconds wide."""
    keys = ENTITY_COLUMNS[kind]
    w = len(keys)
    cur.execute(
        _picked_spans_sql(kind, f"{', '.join(f'k.{k}' for k in keys)}, span_start, n, data")
    )
    found = cur.fetchall()
    if not found:
        return Staged(False, frozenset())
    cur.execute(f"SELECT {', '.join(keys)}, bucket FROM {pick_table(kind)}")
    picked = {(tuple(int(v) for v in r[:w]), int(r[w])) for r in cur.fetchall()}
    rows: list[tuple[Any, ...]] = []
    version: set[tuple[tuple[int, ...], int, int]] = set()
    for r in found:
        entity = tuple(int(v) for v in r[:w])
        version.add((entity, int(r[w]), int(r[w + 1])))
        for s in packed.decode(kind, r[w + 2]):
            if (entity, int(float(s[0]) // step * step)) in picked:
                rows.append((*entity, *s))
    return Staged(_stage(cur, kind, rows), frozenset(version))


def picked_version(cur: Any, kind: str) -> Version:
    keys = ENTITY_COLUMNS[kind]
    w = len(keys)
    cur.execute(_picked_spans_sql(kind, f"{', '.join(f'k.{k}' for k in keys)}, span_start, n"))
    return frozenset(
        (tuple(int(v) for v in r[:w]), int(r[w]), int(r[w + 1])) for r in cur.fetchall()
    )


def _stage(cur: Any, kind: str, rows: Sequence[tuple[Any, ...]]) -> bool:
    """Empty this connection's temp table for `kind` and put `rows` in it. False (and
    nothing made) when there are none."""
    if not rows:
        return False
    vendor = cur.db.vendor
    keys = ENTITY_COLUMNS[kind]
    table = unpacked_table(kind)
    integer = dict(zip(packed.metric_names(kind), packed.integer_flags(kind)[1:], strict=True))
    columns = [f"{k} INTEGER NOT NULL" for k in keys] + [f"ts {ts_type(vendor)} NOT NULL"]
    columns += [f"{m} {number_type(integer[m], vendor)}" for m in packed.metric_names(kind)]
    pk = ", ".join((*keys, "ts"))
    cur.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {table} ({', '.join(columns)}, PRIMARY KEY ({pk}))"
    )
    cur.execute(f"DELETE FROM {table}")
    names = (*keys, *packed.sample_columns(kind))
    one = "(" + ", ".join(["%s"] * len(names)) + ")"
    for start in range(0, len(rows), _ROWS_PER_INSERT):
        chunk = rows[start : start + _ROWS_PER_INSERT]
        cur.execute(
            f"INSERT INTO {table} ({', '.join(names)}) VALUES {', '.join([one] * len(chunk))}",
            [v for row in chunk for v in row],
        )
    if vendor == POSTGRESQL:
        cur.execute(f"ANALYZE {table}")  # a temp table has no statistics until analysed
    return True


def read_entity(
    cur: Any,
    kind: str,
    entity: Sequence[int],
    lo: float,
    hi: float,
    sql: Callable[[str], str],
    params: Sequence[Any],
) -> list[tuple[Any, ...]]:
    """Run `sql(table)` over one entity's raw samples in [lo, hi): `table` is the raw
    table, or `source(kind)` (aliased) when packed spans overlap the range (staged first). Read
    again when a packer pass moved rows under it."""
    rows: list[tuple[Any, ...]] = []
    for _ in range(READ_ATTEMPTS):
        staged = stage_entity(cur, kind, entity, lo, hi)
        table = f"{source(kind)} AS raw_rows" if staged.any else raw_table(kind)
        cur.execute(sql(table), list(params))
        rows = list(cur.fetchall())
        if entity_version(cur, kind, entity, lo, hi) == staged.version:
            break
    return rows
