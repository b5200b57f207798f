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

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from agents.protocol.metrics import METRICS
from fleet.storage.db import Row, Tx, Upsert
from fleet.storage.schema import ENTITY_COLUMNS, field_ts_column, latest_table

Key = tuple[int, ...]

_NAMES: dict[str, tuple[str, ...]] = {
    kind: tuple(m.name for m in metrics) for kind, metrics in METRICS.items()
}


def metric_names(kind: str) -> tuple[str, ...]:
    return _NAMES[kind]


def latest_columns(kind: str) -> tuple[str, ...]:
    """Entity keys, `ts`, then each metric followed by its sample time."""
    return merge_columns(kind, _NAMES[kind])


@cache
def merge_columns(kind: str, fields: tuple[str, ...]) -> tuple[str, ...]:
    """The columns one merge statement writes: keys, `ts`, the fields, then their times."""
    return (*ENTITY_COLUMNS[kind], "ts", *fields, *(field_ts_column(n) for n in fields))


@cache
def merge_statement(kind: str, fields: tuple[str, ...]) -> Upsert:
    """The per-field newest-wins merge of entities carrying exactly these fields."""
    return Upsert(
        latest_table(kind),
        merge_columns(kind, fields),
        ENTITY_COLUMNS[kind],
        merge_set_clause(kind, fields),
        merge_types(kind, fields),
    )


@cache
def merge_types(kind: str, fields: tuple[str, ...]) -> tuple[str, ...]:
    """PostgreSQL types of `merge_columns`, for binary COPY."""
    integer = {m.name: m.integer for m in METRICS[kind]}
    types: list[str] = ["int4"] * len(ENTITY_COLUMNS[kind]) + ["float8"]
    types += ["int8" if integer[name] else "float8" for name in fields]
    return (*types, *(["float8"] * len(fields)))


@cache
def merge_set_clause(kind: str, fields: tuple[str, ...]) -> str:
    """`ON CONFLICT … DO UPDATE SET` for these fields: each is taken only if newer."""
    table = latest_table(kind)
    sets = [f"ts = CASE WHEN excluded.ts > {table}.ts THEN excluded.ts ELSE {table}.ts END"]
    for name in fields:
        ts_col = field_ts_column(name)
        newer = (
            f"excluded.{ts_col} IS NOT NULL AND "
            f"({table}.{ts_col} IS NULL OR excluded.{ts_col} >= {table}.{ts_col})"
        )
        sets.append(f"{name} = CASE WHEN {newer} THEN excluded.{name} ELSE {table}.{name} END")
        sets.append(
            f"{ts_col} = CASE WHEN {newer} THEN excluded.{ts_col} ELSE {table}.{ts_col} END"
        )
    return ", ".join(sets)


Pending = list[tuple[float, dict[str, Any]]]  # (time, sample) of one entity, in arrival order


@dataclass
class LatestDelta:
    """Per kind, per entity: the samples committed since the last save. Adding one is a
    list append (samples arrive far more often than saves happen); folding them into
    one row per entity, newest per field, is done once per save by `shaped_rows`."""

    kinds: dict[str, dict[Key, Pending]] = field(default_factory=dict)

    def __len__(self) -> int:
        return sum(len(t) for t in self.kinds.values())

    def add(self, kind: str, key: Key, sample: dict[str, Any], now: float) -> None:
        # A node whose clock runs ahead (up to the protocol's bound) counts as "now",
        # so it cannot pin its fields above every later on-time sample.
        ts = sample["ts"]
        if ts > now:
            ts = now
        table = self.kinds.get(kind)
        if table is None:
            table = self.kinds[kind] = {}
        pending = table.get(key)
        if pending is None:
            table[key] = [(ts, sample)]
        else:
            pending.append((ts, sample))

    def shaped_rows(self, kind: str) -> dict[tuple[str, ...], list[Row]]:
        """One row per entity (newest value per field), grouped by the fields it carries
        (most entities share one shape)."""
        out: dict[tuple[str, ...], list[Row]] = {}
        for key, pending in self.kinds.get(kind, {}).items():
            if len(pending) == 1:  # the usual case at 1 Hz: every field has the sample's time
                newest, values = pending[0]
                fields, values_of = _shape(kind, tuple(values))
                row = (*key, newest, *values_of(values), *((newest,) * len(fields)))
            else:
                pending.sort(key=_BY_TIME)  # stable: equal times keep arrival order
                newest, last = pending[-1]
                covered = last.keys()
                values, times = {}, {}
                for ts, sample in pending[:-1]:
                    if sample.keys() <= covered:
                        continue  # every field of it is overwritten by the newest sample
                    values.update(sample)
                    times.update(dict.fromkeys(sample, ts))
                values.update(last)
                times.update(dict.fromkeys(last, newest))
                fields, values_of = _shape(kind, tuple(values))
                row = (*key, newest, *values_of(values), *values_of(times))
            out.setdefault(fields, []).append(row)
        return out

    def changed(self) -> dict[str, list[Key]]:
        return {kind: list(table) for kind, table in self.kinds.items() if table}


_BY_TIME = operator.itemgetter(0)
_SHAPES: dict[tuple[str, tuple[str, ...]], tuple[tuple[str, ...], Any]] = {}


def _shape(kind: str, keys: tuple[str, ...]) -> tuple[tuple[str, ...], Any]:
    """The metrics among a sample's keys (catalogue order) and a getter returning their
    values as a tuple; cached, as agents send few shapes (bounded against hostile ones)."""
    found = _SHAPES.get((kind, keys))
    if found is None:
        present = set(keys)
        fields = tuple(n for n in _NAMES[kind] if n in present)
        # itemgetter of one name returns the item, not a 1-tuple: name it twice and slice.
        if len(fields) == 1:
            only = fields[0]
            found = (fields, lambda d: (d[only],))
        elif fields:
            found = (fields, operator.itemgetter(*fields))
        else:
            found = (fields, lambda d: ())
        if len(_SHAPES) < 4096:
            _SHAPES[(kind, keys)] = found
    return found


def merge_latest(tx: Tx, delta: LatestDelta) -> None:
    """Merge a delta into the latest-state tables (inside the caller's transaction).

    Lock order: kinds in catalogue order, each kind's entities in key order whatever
    fields each carries (`Tx.upsert_shapes`: on PostgreSQL one statement over the union of
    the shapes' fields, a field an entity lacks NULL and so never taken). Two writers
    merging overlapping entities — HTTP batches of one node spread over two server
    processes by the proxy, a node that reconnected to the other one — then wait for each
    other instead of deadlocking."""
    for kind in METRICS:
        if not delta.kinds.get(kind):
            continue
        shapes = delta.shaped_rows(kind)
        union = tuple(n for n in _NAMES[kind] if any(n in fields for fields in shapes))
        parts = [(merge_statement(kind, fields), rows) for fields, rows in shapes.items()]
        tx.upsert_shapes(merge_statement(kind, union), parts)


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
    first_value, first_ts = nkey + 1, nkey + 1 + len(names)
    out: dict[Key, LatestRow] = {}
    for rec in records:
        values: dict[str, Any] = {}
        times: dict[str, float] = {}
        for i, name in enumerate(names):
            value = rec[first_value + i]
            if value is not None:
                values[name] = value
                times[name] = rec[first_ts + i]
        out[tuple(rec[:nkey])] = LatestRow(values, times, rec[nkey])
    return out


def select_latest_sql(kind: str, where: str = "") -> str:
    sql = f"SELECT {', '.join(latest_columns(kind))} FROM {latest_table(kind)}"
    return f"{sql} WHERE {where}" if where else sql
