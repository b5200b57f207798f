"""The one write path for samples: every source of data calls `write_samples`.

The agent ingest pipeline does, and so will the Prometheus pull, backfills and
imports. One call stores, in ONE transaction on either engine:

- raw rows per sample kind (idempotent: keyed by time and entity, so a resend is a no-op),
- the late-data marks that make the rollup redo a minute it already summarised,
- events (keyed by source, seq and position),
- statements that keep inventory facts current (GPU limits, node info, source stats),
- and, when given, the latest-state merge (`fleet.storage.latest`), per field newest-wins.

Either all of it is stored or none of it is; the exception tells the caller why
(`fleet.storage.dialect.failure_kind` says whether to refuse or retry).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fleet.storage.db import Database, Row, Tx
from fleet.storage.latest import Key, LatestDelta, merge_latest, metric_names
from fleet.storage.schema import ENTITY_COLUMNS

Sample = dict[str, Any]


@dataclass
class SampleWrite:
    """Everything one commit stores. Add to it with `add_samples`; write with `write_samples`."""

    samples: dict[str, list[tuple[Key, Sample]]] = field(default_factory=dict)
    events: list[Row] = field(default_factory=list)
    statements: list[tuple[str, Row]] = field(default_factory=list)

    def add_samples(self, kind: str, items: Iterable[tuple[Key, Sample]]) -> None:
        self.samples.setdefault(kind, []).extend(items)

    def extend(self, other: SampleWrite) -> None:
        for kind, items in other.samples.items():
            self.add_samples(kind, items)
        self.events.extend(other.events)
        self.statements.extend(other.statements)

    def __bool__(self) -> bool:
        return bool(self.samples or self.events or self.statements)


def write_samples(db: Database, write: SampleWrite, latest: LatestDelta | None = None) -> None:
    """Store `write` (and merge `latest`, if given) in one transaction."""
    db.transaction(lambda tx: _write(tx, write, latest))


def _write(tx: Tx, write: SampleWrite, latest: LatestDelta | None) -> None:
    for kind, (columns, rows) in raw_rows(write).items():
        tx.insert_raw(kind, columns, rows)
    for sql, params in rollup_marks(write):
        tx.execute(sql, params)
    if write.events:
        tx.insert_events(write.events)
    for sql, params in write.statements:
        tx.execute(sql, params)
    if latest is not None and len(latest):
        merge_latest(tx, latest)


def latest_delta(write: SampleWrite, now: float) -> LatestDelta:
    """The latest-state change `write` makes (for callers that store it at once)."""
    delta = LatestDelta()
    for kind, items in write.samples.items():
        for key, sample in items:
            delta.add(kind, key, sample, now)
    return delta


def rollup_marks(write: SampleWrite) -> list[tuple[str, Row]]:
    """Late rows (an agent's spool after a partition) mark their minute for the rollup
    to redo, in the same commit as the rows: a crash cannot split them."""
    marks: list[tuple[str, Row]] = []
    for kind, items in write.samples.items():
        if not items:
            continue
        oldest = min(s["ts"] for _, s in items)
        bucket = int(oldest // 60) * 60
        marks.append(
            (
                # Always touches the row (taking its lock), so a rollup claiming it
                # concurrently waits for this commit instead of passing these rows by.
                "UPDATE fw_rollup_state SET dirty_from = CASE WHEN done_until > %s"
                " AND (dirty_from IS NULL OR dirty_from > %s) THEN %s ELSE dirty_from END"
                " WHERE tier = '1m' AND kind = %s",
                (bucket, bucket, bucket, kind),
            )
        )
    return marks


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
