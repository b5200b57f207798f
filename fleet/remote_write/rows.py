"""The raw rows remote write ships, read through this one function (`read_after`), so that a
change in how raw hours are stored changes one place. The shipper runs seconds behind ingest,
long before a raw hour is sealed and packed: it reads the open raw table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from agents.protocol.metrics import METRICS
from fleet.storage.schema import ENTITY_COLUMNS, raw_table

__all__ = ("Position", "RawRow", "first_ts", "read_after")


@dataclass(frozen=True, slots=True)
class Position:
    """A place in a kind's raw rows in (ts, entity) order: after the row (ts, entity), or,
    with no entity, at the first row of `ts`."""

    ts: float
    entity: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class RawRow:
    ts: float
    entity: tuple[int, ...]
    values: tuple[float | int | None, ...]  # in METRICS[kind] order; None: not sent


def fields(kind: str) -> tuple[str, ...]:
    return tuple(m.name for m in METRICS[kind])


def read_after(
    kind: str,
    after: Position,
    lo: float,
    hi: float,
    limit: int,
    using: str = DEFAULT_DB_ALIAS,
) -> list[RawRow]:
    """Up to `limit` raw rows of `kind` past `after`, with `lo` <= ts < `hi` (epoch s), in
    (ts, entity) order."""
    keys = ENTITY_COLUMNS[kind]
    names = fields(kind)
    order = ", ".join(("ts", *keys))
    where, params = "ts >= %s AND ts < %s", [lo, hi]
    if after.entity and after.ts >= lo:
        marks = ", ".join(["%s"] * (1 + len(keys)))
        where += f" AND ({order}) > ({marks})"
        params += [after.ts, *after.entity]
    sql = (
        f"SELECT {order}, {', '.join(names)} FROM {raw_table(kind)}"
        f" WHERE {where} ORDER BY {order} LIMIT %s"
    )
    with connections[using].cursor() as cur:
        cur.execute(sql, [*params, limit])
        found: Sequence[tuple[Any, ...]] = cur.fetchall()
    n = len(keys)
    return [
        RawRow(float(r[0]), tuple(int(k) for k in r[1 : 1 + n]), tuple(r[1 + n :])) for r in found
    ]


def first_ts(kind: str, using: str = DEFAULT_DB_ALIAS) -> float | None:
    """The oldest raw row's time, None when the table is empty."""
    with connections[using].cursor() as cur:
        cur.execute(f"SELECT min(ts) FROM {raw_table(kind)}")
        row = cur.fetchone()
    return None if row is None or row[0] is None else float(row[0])
