"""Refusals counted per source, for the admin's "Refused input" list.

The log says what each refusal was (rate-limited); this says how much each source had
refused, kept past the log's rotation. Every refusal of a server process is counted in
memory under (source, transport, status, field) — no database work on the refusing
path, so a flood of bad input costs a dict update — and a daemon thread adds the counts
to `fleet_rejectiontally` every `FLUSH_EVERY_S` (started by the ASGI application). At
most `MAX_KEYS` keys wait between flushes; past that, refusals count under the source
"(too many sources)". Counts a process had not flushed when it was killed are lost (the
log still has them).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass

log = logging.getLogger("fleet.ingest.tally")

FLUSH_EVERY_S = 5.0
MAX_KEYS = 5_000
OVERFLOW_SOURCE = "(too many sources)"

Key = tuple[str, str, int, str]  # source, transport, status, field

# Samples an ingest writer acknowledged but did not store: stamped older than raw
# retention (fleet.storage.samples.drop_too_old), e.g. a node whose clock is far behind.
# Counted by the writer itself, in the commit that leaves them out (`too_old_statement`).
TOO_OLD_TRANSPORT = "ingest writer"
TOO_OLD_STATUS = 200  # the batch was acknowledged; the rest of it is stored
TOO_OLD_FIELD = "ts"


@dataclass
class Count:
    count: int
    first_at: float
    last_at: float
    last_reason: str
    last_client: str


class Tally:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[Key, Count] = {}
        self._flusher: threading.Thread | None = None

    def add(
        self, source: str, transport: str, status: int, field: str, reason: str, client: str
    ) -> None:
        now = time.time()
        key: Key = (source[:240], transport[:20], status, field[:100])
        with self._lock:
            if key not in self._counts and len(self._counts) >= MAX_KEYS:
                key = (OVERFLOW_SOURCE, *key[1:])
            seen = self._counts.get(key)
            if seen is None:
                self._counts[key] = Count(1, now, now, reason[:300], client[:240])
            else:
                seen.count += 1
                seen.last_at, seen.last_reason, seen.last_client = now, reason[:300], client[:240]

    def start_flushing(self) -> None:
        """Called once by a server process (fleetwatch/asgi.py); elsewhere (tests, tools)
        counts stay in memory until `flush()` is called."""
        with self._lock:
            if self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._flush_forever, name="rejection-tally", daemon=True
                )
                self._flusher.start()

    def take(self) -> dict[Key, Count]:
        with self._lock:
            counts, self._counts = self._counts, {}
        return counts

    def flush(self) -> int:
        """Add what was counted since the last flush to the table; kept for the next
        flush if the database refuses. Returns the keys written."""
        from django.db import DatabaseError

        counts = self.take()
        if not counts:
            return 0
        try:
            _write(counts)
        except DatabaseError as exc:
            log.warning("could not save refusal counts (kept for the next try): %s", exc)
            self._merge_back(counts)
            return 0
        return len(counts)

    def _merge_back(self, counts: dict[Key, Count]) -> None:
        with self._lock:
            for key, old in counts.items():
                new = self._counts.get(key)
                if new is None:
                    self._counts[key] = old
                else:
                    new.count += old.count
                    new.first_at = min(new.first_at, old.first_at)

    def _flush_forever(self) -> None:
        from django.db import connection

        while True:
            time.sleep(FLUSH_EVERY_S)
            try:
                self.flush()
            except Exception:  # never let the counting thread die
                log.exception("refusal counts: flush failed")
            finally:
                connection.close()  # this thread's own connection; reopened next time


_UPSERT = (
    "INSERT INTO fleet_rejectiontally (source, transport, status, field, count, last_reason,"
    " last_client, first_at, last_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (source, transport, status, field) DO UPDATE SET"
    " count = fleet_rejectiontally.count + excluded.count,"
    " last_reason = excluded.last_reason, last_client = excluded.last_client,"
    " last_at = excluded.last_at"
)


def _write(counts: dict[Key, Count]) -> None:
    from django.db import connection, transaction

    rows = [
        (*key, c.count, c.last_reason, c.last_client, _moment(c.first_at), _moment(c.last_at))
        for key, c in counts.items()
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(_UPSERT, rows)


def too_old_statement(
    source: str, samples: int, keep_s: float, now: float, vendor: str
) -> tuple[str, tuple[object, ...]]:
    """The upsert counting one batch of `source` with `samples` samples older than raw
    retention, for a writer's own transaction (`%s` placeholders; the time in the form
    Django reads back on `vendor`)."""
    from fleet.ingest.resolve import discovered_at_param

    reason = (
        f"{samples} samples older than raw retention ({keep_s / 3600:g} h) were acknowledged"
        " and not stored: is the node's clock behind?"
    )
    moment = discovered_at_param(vendor, now)
    key = (source[:240], TOO_OLD_TRANSPORT, TOO_OLD_STATUS, TOO_OLD_FIELD)
    return _UPSERT, (*key, 1, reason[:300], "", moment, moment)


def _moment(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.UTC)


tally = Tally()
