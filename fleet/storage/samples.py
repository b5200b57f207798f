"""The one write path for samples: every source of data calls `write_samples`.

The agent ingest pipeline does, and so will the Prometheus pull, backfills and
imports. One call stores, in ONE transaction on either engine:

- raw rows per sample kind (idempotent: keyed by time and entity, so a resend is a no-op),
- the late-data marks that make the rollup redo a minute it may already have summarised
  (`fleet.storage.late`): INSERTs only, so the commit never waits on a rollup or retention,
- events (keyed by source, seq and position),
- statements that keep inventory facts current (GPU limits, node info, source stats),
- who runs on each GPU, as intervals opened, kept and closed (`fleet.storage.workloads`),
- each node's InfiniBand/RoCE ports, and the link events their changes make
  (`fleet.storage.fabric`),
- and, when given, the latest-state merge (`fleet.storage.latest`), per field newest-wins.

Either all of it is stored or none of it is; the exception tells the caller why
(`fleet.storage.dialect.failure_kind` says whether to refuse or retry).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.storage.db import Database, Row, Tx
from fleet.storage.fabric import FabricWrite, store_fabric
from fleet.storage.late import Mark, insert_marks
from fleet.storage.latest import Key, LatestDelta, merge_latest, metric_names
from fleet.storage.schema import ENTITY_COLUMNS
from fleet.storage.workloads import Snapshot, store_workloads

Sample = dict[str, Any]


@dataclass
class SampleWrite:
    """Everything one commit stores. Add to it with `add_samples`; write with `write_samples`."""

    samples: dict[str, list[tuple[Key, Sample]]] = field(default_factory=dict)
    events: list[Row] = field(default_factory=list)
    statements: list[tuple[str, Row]] = field(default_factory=list)
    workloads: list[Snapshot] = field(default_factory=list)  # nodes' workloads snapshots
    fabric: list[FabricWrite] = field(default_factory=list)  # nodes' InfiniBand/RoCE ports

    def add_samples(self, kind: str, items: Iterable[tuple[Key, Sample]]) -> None:
        self.samples.setdefault(kind, []).extend(items)

    def extend(self, other: SampleWrite) -> None:
        for kind, items in other.samples.items():
            self.add_samples(kind, items)
        self.events.extend(other.events)
        self.statements.extend(other.statements)
        self.workloads.extend(other.workloads)
        self.fabric.extend(other.fabric)

    def __bool__(self) -> bool:
        return bool(self.samples or self.events or self.statements or self.workloads or self.fabric)


def write_samples(
    db: Database,
    write: SampleWrite,
    latest: LatestDelta | None = None,
    *,
    horizon: float | None = None,
) -> dict[str, int]:
    """Store `write` (and merge `latest`, if given) in one transaction.

    With `horizon` (the writer's `now` minus raw retention, see `raw_horizon`), samples
    stamped before it are taken out of `write` first and not stored: raw retention
    would delete them at its next pass, and holding them for a rollup would pin it.
    Returns how many were left out per kind (only kinds that had any). A caller that
    builds its latest delta from `write` afterwards sees only what was stored; one that
    builds it first calls `drop_too_old` itself before (`latest` is merged as given).
    """
    too_old = drop_too_old(write, horizon) if horizon is not None else {}
    db.transaction(lambda tx: _write(tx, write, latest))
    return too_old


def _write(tx: Tx, write: SampleWrite, latest: LatestDelta | None) -> None:
    stored = raw_rows(write)
    for kind, (columns, rows) in stored.items():
        tx.insert_raw(kind, columns, rows)
    if stored:
        # After the raw rows: on PostgreSQL the transaction has an xid by now, which is
        # what lets a rollup moving the seal wait for this commit (fleet.storage.late).
        for sql, params in late_marks(tx, write):
            tx.execute(sql, params)
    if write.events:
        tx.insert_events(write.events)
    run_statements(tx, write.statements)
    if write.workloads:
        store_workloads(tx, write.workloads)
    if write.fabric:
        store_fabric(tx, write.fabric)
    if latest is not None and len(latest):
        merge_latest(tx, latest)


def run_statements(tx: Tx, statements: Sequence[tuple[str, Row]]) -> None:
    """Run the statements in order. A run of the same statement (the ingest child updates
    every source it heard from, ~1,250 a second at 10,000 GPUs) goes as one `executemany`,
    which psycopg pipelines: one round trip for the run instead of one per source."""
    for sql, run in itertools.groupby(statements, key=operator.itemgetter(0)):
        rows = [params for _, params in run]
        if len(rows) == 1:
            tx.execute(sql, rows[0])
        else:
            tx.execute_many(sql, rows)


def raw_horizon(now: float) -> float:
    """The oldest sample time raw retention keeps as of `now`."""
    return now - raw_keep_s()


def raw_keep_s() -> float:
    """`RETENTION_RAW_HOURS` in seconds, from Django's settings (the ingest child, which runs
    without Django, is handed the same figure by its server: fleet/ingest/link.py)."""
    from django.conf import settings

    return float(settings.RETENTION_RAW_HOURS) * 3600


def drop_too_old(write: SampleWrite, horizon: float) -> dict[str, int]:
    """Take samples stamped before `horizon` out of `write`; how many per kind.

    History that old is not stored raw: the next retention pass would delete it (and
    a time-partitioned raw table may have no partition left for it). This is what keeps
    a node whose clock is days behind from pinning rollups and retention."""
    dropped: dict[str, int] = {}
    for kind, items in write.samples.items():
        if not items or min(s["ts"] for _, s in items) >= horizon:
            continue
        kept = [item for item in items if item[1]["ts"] >= horizon]
        dropped[kind] = len(items) - len(kept)
        write.samples[kind] = kept
    return dropped


def count_too_old(write: SampleWrite, horizon: float) -> int:
    """How many samples of `write` `drop_too_old` would leave out (`write` unchanged)."""
    return sum(
        sum(1 for _, s in items if s["ts"] < horizon)
        for items in write.samples.values()
        if items and min(s["ts"] for _, s in items) < horizon
    )


def late_marks(tx: Tx, write: SampleWrite) -> list[tuple[str, Row]]:
    """Marks for the rows of `write` whose minute the 1m rollup may already have
    summarised: one per distinct (entity, minute) before the kind's seal.

    The seal is read with a plain SELECT (never waits: MVCC on PostgreSQL, and SQLite's
    writer already holds the lock). A kind the rollup never ran for has no state row
    and needs no marks: its first run starts at the oldest raw row."""
    seals = {str(kind): int(seal) for kind, seal in tx.execute(_SEALS) if seal is not None}
    statements: list[tuple[str, Row]] = []
    for kind, items in write.samples.items():
        seal = seals.get(kind)
        # seal is a whole minute, so "minute < seal" is "ts < seal"
        if seal is None or not items or min(s["ts"] for _, s in items) >= seal:
            continue
        marks: set[Mark] = {(*key, int(s["ts"] // 60) * 60) for key, s in items if s["ts"] < seal}
        statements += [(sql, tuple(params)) for sql, params in insert_marks(kind, "1m", marks)]
    return statements


_SEALS = "SELECT kind, sealed_until FROM fw_rollup_state WHERE tier = '1m'"


def latest_delta(write: SampleWrite, now: float) -> LatestDelta:
    """The latest-state change `write` makes (for callers that store it at once)."""
    delta = LatestDelta()
    for kind, items in write.samples.items():
        for key, sample in items:
            delta.add(kind, key, sample, now)
    return delta


def raw_rows(write: SampleWrite) -> dict[str, tuple[tuple[str, ...], list[Row]]]:
    """Per kind: the columns this commit carries, and its rows.

    Only metrics present in at least one sample become columns (the rest default to
    NULL): fewer bound parameters, the biggest single cost of the SQLite insert."""
    out: dict[str, tuple[tuple[str, ...], list[Row]]] = {}
    for kind, items in write.samples.items():
        if not items:
            continue
        present: set[str] = set()
        for _, sample in items:
            present.update(sample)
        metrics = tuple(m for m in metric_names(kind) if m in present)
        columns = (*ENTITY_COLUMNS[kind], "ts", *metrics)
        out[kind] = (columns, _rows(items, metrics))
    return out


def _rows(items: list[tuple[Key, Sample]], metrics: tuple[str, ...]) -> list[Row]:
    if not metrics:
        return [(*key, s["ts"]) for key, s in items]
    # Samples of one shape carry every column: itemgetter reads them in C. A commit
    # mixing shapes (a slow field in some samples) takes the .get path.
    getter = operator.itemgetter("ts", *metrics)
    try:
        return [(*key, *getter(s)) for key, s in items]
    except KeyError:
        return [(*key, s["ts"], *map(s.get, metrics)) for key, s in items]
