"""Latest state: one row per entity, merged in the database per field, newest wins.

A sample changes only the fields it carries, and only where it is at least as new
as the stored value of that field (each field has its own `<metric>_ts`). So a
writer holding an old sample (another server process, a node that reconnected
elsewhere, a spool backlog arriving late) can never move a field back in time,
and a field whose reads stopped keeps its value *and its age*.

Writers hold a `LatestDelta` — only what changed since their last save — and
merge it with `merge_latest` (inside `fleet.storage.samples.write_samples`).
Readers get `LatestRow`s: values and per-field sample times.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from agents.protocol.metrics import METRICS
from fleet.storage.db import Row, Tx
from fleet.storage.schema import ENTITY_COLUMNS, field_ts_column, latest_table

Key = tuple[int, ...]

_NAMES: dict[str, tuple[str, ...]] = {
    kind: tuple(m.name for m in metrics) for kind, metrics in METRICS.items()
}


def metric_names(kind: str) -> tuple[str, ...]:
    return _NAMES[kind]


@cache
def latest_columns(kind: str) -> tuple[str, ...]:
    """Entity keys, `ts`, then each metric followed by its sample time."""
    cols: list[str] = [*ENTITY_COLUMNS[kind], "ts"]
    for name in _NAMES[kind]:
        cols += [name, field_ts_column(name)]
    return tuple(cols)


@cache
def merge_sql(kind: str) -> str:
    """Upsert one entity's changed fields; each field is taken only if it is newer."""
    table = latest_table(kind)
    cols = latest_columns(kind)
    keys = ENTITY_COLUMNS[kind]
    sets = [f"ts = CASE WHEN excluded.ts > {table}.ts THEN excluded.ts ELSE {table}.ts END"]
    for name in _NAMES[kind]:
        ts_col = field_ts_column(name)
        newer = (
            f"excluded.{ts_col} IS NOT NULL AND "
            f"({table}.{ts_col} IS NULL OR excluded.{ts_col} >= {table}.{ts_col})"
        )
        sets.append(f"{name} = CASE WHEN {newer} THEN excluded.{name} ELSE {table}.{name} END")
        sets.append(
            f"{ts_col} = CASE WHEN {newer} THEN excluded.{ts_col} ELSE {table}.{ts_col} END"
        )
    return (
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {', '.join(sets)}"
    )


@dataclass(slots=True)
class EntityDelta:
    """What one entity's samples changed since the last save: field -> value and time.
    (The dicts may also hold `ts` and entity-name keys; rows take only metrics.)"""

    values: dict[str, Any]
    ts: dict[str, float]
    newest: float


@dataclass
class LatestDelta:
    """Per kind, per entity: the fields changed since the last save (newest per field)."""

    kinds: dict[str, dict[Key, EntityDelta]] = field(default_factory=dict)

    def __len__(self) -> int:
        return sum(len(t) for t in self.kinds.values())

    def add(self, kind: str, key: Key, sample: dict[str, Any], now: float) -> None:
        # A node whose clock runs ahead (up to the protocol's bound) counts as "now",
        # so it cannot pin its fields above every later on-time sample.
        ts = min(sample["ts"], now)
        table = self.kinds.setdefault(kind, {})
        entity = table.get(key)
        if entity is None:
            table[key] = EntityDelta(dict(sample), dict.fromkeys(sample, ts), ts)
        elif ts >= entity.newest:  # the usual case: samples arrive in order (C-level updates)
            entity.values.update(sample)
            entity.ts.update(dict.fromkeys(sample, ts))
            entity.newest = ts
        else:
            for name, value in sample.items():
                if entity.ts.get(name, -1.0) <= ts:
                    entity.values[name] = value
                    entity.ts[name] = ts

    def merge(self, other: LatestDelta) -> None:
        """Fold `other` (newer or older) into this delta, per field."""
        for kind, table in other.kinds.items():
            for key, entity in table.items():
                mine = self.kinds.setdefault(kind, {}).get(key)
                if mine is None:
                    self.kinds[kind][key] = entity
                    continue
                for name, ts in entity.ts.items():
                    if mine.ts.get(name, -1.0) <= ts:
                        mine.values[name] = entity.values[name]
                        mine.ts[name] = ts
                mine.newest = max(mine.newest, entity.newest)

    def rows(self, kind: str) -> list[Row]:
        names = _NAMES[kind]
        out: list[Row] = []
        for key, entity in self.kinds.get(kind, {}).items():
            values, times = entity.values, entity.ts
            row: list[Any] = [*key, entity.newest]
            for name in names:
                value = values.get(name)
                row += (value, times[name]) if value is not None else (None, None)
            out.append(tuple(row))
        return out

    def changed(self) -> dict[str, list[Key]]:
        return {kind: list(table) for kind, table in self.kinds.items() if table}


def merge_latest(tx: Tx, delta: LatestDelta) -> None:
    """Merge a delta into the latest-state tables (inside the caller's transaction)."""
    for kind in delta.kinds:
        rows = delta.rows(kind)
        if rows:
            tx.execute_many(merge_sql(kind), rows)


@dataclass(frozen=True, slots=True)
class LatestRow:
    """One entity's latest state: values and when each was sampled (absent = never seen)."""

    values: dict[str, Any]
    ts: dict[str, float]
    newest: float


def rows_to_latest(kind: str, records: Iterable[Sequence[Any]]) -> dict[Key, LatestRow]:
    """Turn `SELECT <latest_columns(kind)>` records into LatestRows keyed by entity."""
    nkey = len(ENTITY_COLUMNS[kind])
    names = _NAMES[kind]
    out: dict[Key, LatestRow] = {}
    for rec in records:
        values: dict[str, Any] = {}
        times: dict[str, float] = {}
        pos = nkey + 1
        for name in names:
            value = rec[pos]
            if value is not None:
                values[name] = value
                times[name] = rec[pos + 1]
            pos += 2
        out[tuple(rec[:nkey])] = LatestRow(values, times, rec[nkey])
    return out


def select_latest_sql(kind: str, where: str = "") -> str:
    sql = f"SELECT {', '.join(latest_columns(kind))} FROM {latest_table(kind)}"
    return f"{sql} WHERE {where}" if where else sql
