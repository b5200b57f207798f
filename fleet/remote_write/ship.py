"""One shipper pass: each kind's settled raw rows past its cursor, to the receiver, in order.

**Settled point.** A pass ships rows only before the 1-minute rollup's `done_until`
(fw_rollup_state): before the rollup moves it, it seals the range and waits out every ingest
commit that may have read the old seal (fleet/storage/rollups.py, fleet/storage/late.py), so
no commit can still add a row the cursor has passed without leaving a late-data mark. Rows
are read in (ts, entity) order, so each series goes out in time order, as the spec requires.

**Late data.** A row committed after the cursor has passed its time (an agent replaying its
spool after an outage) lies behind the cursor and is not shipped: the receiver would refuse most
of it anyway (Prometheus answers 400 to out-of-order samples unless its out-of-order window
is set). Fleetwatch keeps it: the rollups recompute its minutes, and its own history pages
show it.

**Answers.** The cursor moves only after a 2xx. A 4xx other than 429 is final (the spec:
never retried): logged, its samples counted as dropped, the cursor moves past them. A 5xx,
a 429 or no connection ends the pass with the cursor where it was, and passes back off
(`backoff_s`) until one succeeds. A resend of what a receiver had stored before it failed
is harmless: Prometheus accepts an exact duplicate (same time, same value) without error.

One pass at a time: on PostgreSQL a pass holds an advisory lock, and a second one started
meanwhile (a redelivered task) returns at once. Each pass also moves a cursor only from where
it read it (a conditional UPDATE), and stops when that fails.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from django.db import DEFAULT_DB_ALIAS, connections

from fleet.models import RemoteWriteCursor
from fleet.remote_write import client, rows, series
from fleet.remote_write.wire import compress, encode_write_request
from fleet.storage.single_flight import single_flight
from fleetwatch.remote_write_settings import RemoteWrite

__all__ = (
    "PassResult",
    "backoff_s",
    "request_body",
    "settled_until",
    "ship_pass",
    "split_requests",
)

log = logging.getLogger(__name__)

# Raw rows read per query: up to 34 GPU fields each, so up to 17 requests of 2,000 samples.
ROWS_PER_READ = 1000
# Each read covers a window of time from the cursor, adapted to hold about ROWS_PER_READ rows
# (`_next_window`): 1,000 rows are a tenth of a second of 10,000 GPUs, or minutes of a site's
# facility meters.
FIRST_WINDOW_S = 1.0
MIN_WINDOW_S = 0.01
MAX_WINDOW_S = 600.0
# A pass stops taking new rows after this long (the task's soft limit is well above it);
# the next tick goes on from the cursor.
PASS_BUDGET_S = 20.0
# After a failed pass: wait the beat interval, doubled per failure in a row, at most this.
MAX_BACKOFF_S = 60.0


@dataclass
class PassResult:
    shipped: dict[str, int] = field(default_factory=dict)  # samples stored, per kind
    dropped: dict[str, int] = field(default_factory=dict)  # refused for good, per kind
    requests: int = 0
    failed: str | None = None  # why the pass stopped early; None when it did not
    backing_off: bool = False  # skipped: a failure's backoff has not passed
    overlapped: bool = False  # skipped: another pass is running (PostgreSQL)


def backoff_s(failures: int, every_s: float) -> float:
    return float(min(MAX_BACKOFF_S, every_s * 2 ** max(0, failures - 1)))


def settled_until(kind: str, using: str = DEFAULT_DB_ALIAS) -> float | None:
    """The 1-minute rollup's `done_until` for `kind`: no ingest commit adds a row before it
    unmarked. None before the rollup's first run."""
    with connections[using].cursor() as cur:
        cur.execute(
            "SELECT done_until FROM fw_rollup_state WHERE tier = '1m' AND kind = %s", [kind]
        )
        row = cur.fetchone()
    return None if row is None else float(row[0])


def _position(cursor: RemoteWriteCursor) -> rows.Position:
    if cursor.ts is None:
        return rows.Position(cursor.complete_until)
    return rows.Position(cursor.ts, tuple(int(k) for k in cursor.entity))


def split_requests(
    batch: Sequence[rows.RawRow], per_request: int
) -> Iterator[tuple[Sequence[rows.RawRow], int]]:
    """Whole rows per request, `per_request` samples or a row's worth more: (rows, samples)."""
    start, samples = 0, 0
    for i, row in enumerate(batch):
        samples += sum(v is not None for v in row.values)
        if samples >= per_request:
            yield batch[start : i + 1], samples
            start, samples = i + 1, 0
    if start < len(batch):
        yield batch[start:], samples


def request_body(
    kind: str,
    chunk: Sequence[rows.RawRow],
    known: series.EntityLabels,
    encoded: dict[tuple[tuple[int, ...], int], bytes],
) -> tuple[bytes, int, int]:
    """(compressed WriteRequest, samples in it, samples left out: entity not in inventory)."""
    names = rows.fields(kind)
    by_series: dict[bytes, list[tuple[int, float]]] = {}
    sent = unplaced = 0
    for row in chunk:
        ts_ms = round(row.ts * 1000)
        place = series.labels_of(kind, row.entity, known)
        for i, value in enumerate(row.values):
            if value is None:
                continue
            if not place:
                unplaced += 1
                continue
            labels = encoded.get((row.entity, i))
            if labels is None:
                labels = series.series_labels(kind, names[i], place)
                encoded[(row.entity, i)] = labels
            by_series.setdefault(labels, []).append((ts_ms, float(value)))
            sent += 1
    return compress(encode_write_request(by_series.items())), sent, unplaced


def _save(
    cursor: RemoteWriteCursor, seen: tuple[float | None, float], using: str, **changes: object
) -> bool:
    """Move the cursor only from where this pass read it; False: another pass moved it."""
    moved = (
        RemoteWriteCursor.objects.using(using)
        .filter(pk=cursor.pk, ts=seen[0], complete_until=seen[1])
        .update(**changes)
    )
    for name, value in changes.items():
        setattr(cursor, name, value)
    return moved == 1


def _cursor(kind: str, using: str) -> RemoteWriteCursor | None:
    """The kind's cursor; made at its oldest raw row on the first pass that finds one."""
    cursor = RemoteWriteCursor.objects.using(using).filter(kind=kind).first()
    if cursor is not None:
        return cursor
    oldest = rows.first_ts(kind, using)
    if oldest is None:
        return None
    cursor, _ = RemoteWriteCursor.objects.using(using).get_or_create(
        kind=kind, defaults={"complete_until": oldest}
    )
    return cursor


def _fail(now: float, config: RemoteWrite, answer: client.Answer, using: str) -> str:
    """Keep every cursor where it is; the next passes wait for the backoff."""
    why = f"{answer.status or 'no answer'}: {answer.detail}"
    cursors = RemoteWriteCursor.objects.using(using)
    failures = max([c.failures for c in cursors.all()] or [0]) + 1
    cursors.update(
        failures=failures, retry_at=now + backoff_s(failures, config.every_s), last_error=why
    )
    log.warning(
        "remote write to %s failed (%d in a row), retrying later: %s", config.url, failures, why
    )
    return why


def ship_pass(
    now: float,
    config: RemoteWrite,
    using: str = DEFAULT_DB_ALIAS,
    budget_s: float = PASS_BUDGET_S,
) -> PassResult:
    """Ship every kind's settled rows past its cursor; stop at the first retriable failure."""
    result = PassResult()
    if not config.enabled:
        return result
    if RemoteWriteCursor.objects.using(using).filter(retry_at__gt=now).exists():
        result.backing_off = True
        return result
    with _single_flight(using) as alone:
        if not alone:
            result.overlapped = True
            return result
        return _pass(now, config, using, budget_s, result)


# PostgreSQL advisory lock key of the shipper ("flrw"): one pass at a time, whichever worker.
_LOCK_KEY = 0x666C7277


def _single_flight(using: str) -> contextlib.AbstractContextManager[bool]:
    """One pass at a time (fleet.storage.single_flight): a redelivered or doubled tick
    would otherwise send the same rows twice at once."""
    return single_flight(_LOCK_KEY, using)


def _pass(
    now: float, config: RemoteWrite, using: str, budget_s: float, result: PassResult
) -> PassResult:
    deadline = time.monotonic() + budget_s
    todo: list[tuple[str, RemoteWriteCursor, float]] = []
    for kind in series.KINDS:
        settled = settled_until(kind, using)
        cursor = _cursor(kind, using) if settled is not None else None
        if cursor is not None and settled is not None:
            todo.append((kind, cursor, settled))
    # The kind furthest behind first: a backlog of one kind (GPUs after an outage) takes the
    # pass's budget only while it is the furthest behind, so no kind waits for another's.
    todo.sort(key=lambda item: item[1].complete_until)
    for kind, cursor, settled in todo:
        failed = _ship_kind(kind, cursor, settled, now, config, using, deadline, result)
        if failed is not None:
            result.failed = failed
            return result
        if time.monotonic() >= deadline:
            break
    # A pass that did not fail ends the run of failures for every kind, those that had
    # nothing to send included (their cursors kept the failure a pass wrote to all).
    RemoteWriteCursor.objects.using(using).filter(failures__gt=0).update(
        failures=0, retry_at=None, last_error=""
    )
    return result


def _ship_kind(
    kind: str,
    cursor: RemoteWriteCursor,
    settled: float,
    now: float,
    config: RemoteWrite,
    using: str,
    deadline: float,
    result: PassResult,
) -> str | None:
    """Ship `kind` up to `settled`, a window of time per read; a failure's reason, or None."""
    known = series.entity_labels(kind, using)
    encoded: dict[tuple[tuple[int, ...], int], bytes] = {}
    window = FIRST_WINDOW_S
    while time.monotonic() < deadline:
        position = _position(cursor)
        lo = max(position.ts, cursor.complete_until)
        if lo >= settled:
            return None
        hi = min(settled, lo + window)
        batch = rows.read_after(kind, position, lo, hi, ROWS_PER_READ, using)
        for chunk, _ in split_requests(batch, config.batch_samples):
            outcome = _ship_chunk(kind, chunk, cursor, known, encoded, now, config, using, result)
            if outcome is not None:
                return outcome or None  # "": another pass moved the cursor
        if len(batch) < ROWS_PER_READ:  # the window is done
            seen = (cursor.ts, cursor.complete_until)
            if not _save(cursor, seen, using, complete_until=max(hi, cursor.complete_until)):
                return None
        window = _next_window(window, len(batch))
    return None


def _next_window(window: float, read: int) -> float:
    """Keep a read near `ROWS_PER_READ` rows: on PostgreSQL (raw key entity first) a read
    sorts every row of its window, so the window, not the limit, bounds its cost."""
    if read >= ROWS_PER_READ:
        return max(MIN_WINDOW_S, window / 2)
    if read < ROWS_PER_READ // 4:
        return min(MAX_WINDOW_S, window * 2)
    return window


def _ship_chunk(
    kind: str,
    chunk: Sequence[rows.RawRow],
    cursor: RemoteWriteCursor,
    known: series.EntityLabels,
    encoded: dict[tuple[tuple[int, ...], int], bytes],
    now: float,
    config: RemoteWrite,
    using: str,
    result: PassResult,
) -> str | None:
    """One request and the cursor after it: None when it moved; the failure's reason when
    the pass must stop; "" when another pass moved the cursor first."""
    body, sent, unplaced = request_body(kind, chunk, known, encoded)
    answer = client.post(config, body) if sent else None
    result.requests += answer is not None
    if answer is not None and answer.outcome is client.Outcome.RETRY:
        return _fail(now, config, answer, using)
    dropped, stored = unplaced, 0
    changes: dict[str, object] = {}
    if answer is not None and answer.outcome is client.Outcome.REFUSED:
        log.error(
            "remote write: %s refused %d %s samples for good (%s): %s",
            config.url,
            sent,
            kind,
            answer.status,
            answer.detail,
        )
        dropped += sent
        changes["last_error"] = f"{answer.status}: {answer.detail}"
    else:
        stored = sent
        result.shipped[kind] = result.shipped.get(kind, 0) + sent
        changes |= {"last_success_at": now, "last_error": ""}
    if dropped:
        result.dropped[kind] = result.dropped.get(kind, 0) + dropped
    last = chunk[-1]
    seen = (cursor.ts, cursor.complete_until)
    moved = _save(
        cursor,
        seen,
        using,
        ts=last.ts,
        entity=list(last.entity),
        complete_until=max(cursor.complete_until, last.ts),
        shipped_samples=cursor.shipped_samples + stored,
        dropped_samples=cursor.dropped_samples + dropped,
        failures=0,
        retry_at=None,
        **changes,
    )
    return None if moved else ""
