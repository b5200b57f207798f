"""The ingest child process: `python -m fleet.ingest.child FD`.

One or more per server process (`FLEETWATCH_INGEST_WRITERS`). It owns the durable
write path so that parsing, validation and the database commit run on their own
core and GIL, while the server's event loop only moves bytes (the design that met
the throughput bar in docs/reference/ingest-feasibility.md).

Group commit: it takes everything readable, and while that is fewer than `ROUND_BATCHES`
batches waits up to `ROUND_LINGER_S` for more, commits once, answers every batch in one
RESULTS frame, and repeats. The wait is what makes the rounds large at a fleet's steady
1 Hz: without it a round was the one or two batches that came during the last commit, and
each round's fixed cost (the COPY, the seal read, the commit and its WAL flush, the answer
frame) was paid for every batch or two (docs/benchmarks.md, "Less CPU per GPU sample").

After a commit, and on a tick every `FLEETWATCH_LIVE_INTERVAL_S` when none came, it
merges the pending latest state once `FLEETWATCH_LATEST_SAVE_S` has passed since the last
save, and follows every save at once with a CHANGED frame naming the entities whose latest
state moved, for the server's live publisher. It does not start Django: the server passes
the database settings in `FLEETWATCH_CHILD_CONFIG`. It answers READY before touching the
database, so a database that is down at start makes batches 503, not the server fail.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import sys
import time
from typing import Any

import orjson

from fleet.gc_policy import settle_gc
from fleet.ingest import frames
from fleet.ingest.pipeline import IngestPipeline, Result
from fleet.storage.db import Database, open_db
from fleet.storage.partitions import ensure_raw_ahead

log = logging.getLogger("fleet.ingest.child")

MAX_READ = 4 << 20  # bytes taken per round: bounds one commit's size and latency
# A round of fewer batches than this waits for more, up to ROUND_LINGER_S after its first
# read: a few milliseconds on every ack, against the ~0.5 s the ack is allowed.
ROUND_BATCHES = 32
ROUND_LINGER_S = 0.02
COUNTERS_EVERY_S = 10.0  # how often a writer saves its counters (fleet.models.IngestWriter)
COUNTER_FIELDS = (
    "batches",
    "samples",
    "refused",
    "retried",
    "too_old",
    "saves",
    "save_failures",
)
SAVE_COUNTERS = (
    "INSERT INTO fleet_ingestwriter (writer, started_at, updated_at, "
    + ", ".join(COUNTER_FIELDS)
    + ") VALUES (%s, %s, %s, "
    + ", ".join(["%s"] * len(COUNTER_FIELDS))
    + ") ON CONFLICT (writer) DO UPDATE SET updated_at = excluded.updated_at, "
    + ", ".join(f"{f} = excluded.{f}" for f in COUNTER_FIELDS)
)


class ChildLoop:
    def __init__(
        self, sock: socket.socket, pipeline: IngestPipeline, live_s: float, revalidate_s: float
    ) -> None:
        self.sock = sock
        self.pipeline = pipeline
        self.live_s = live_s
        self.revalidate_s = revalidate_s
        self.buf = bytearray()
        self.stopping = False
        self.started_at = time.time()
        self.name = f"{socket.gethostname()}:{os.getpid()}:{self.started_at:.0f}"[:120]

    def send(self, kind: int, payload: bytes) -> None:
        self.sock.sendall(frames.frame(kind, 0, payload))

    def run(self) -> None:
        self.send(frames.READY, b"")
        _ensure_partitions(self.pipeline.db)  # after READY: it touches the database
        next_tick = time.monotonic() + self.live_s
        next_check = time.monotonic() + self.revalidate_s
        next_counters = time.monotonic()  # a row at start: the row count is the starts
        while not self.stopping:
            timeout = max(0.0, next_tick - time.monotonic())
            readable, _, _ = select.select([self.sock], [], [], timeout)
            if readable and not self._read_round():
                break
            if time.monotonic() >= next_tick:
                self._tick()
                next_tick = time.monotonic() + self.live_s
            if time.monotonic() >= next_check:
                self._revalidate()
                next_check = time.monotonic() + self.revalidate_s
            if time.monotonic() >= next_counters:
                self._save_counters()
                next_counters = time.monotonic() + COUNTERS_EVERY_S
        self.pipeline.save_interval_s = 0.0  # the latest state on disk matches what was acked
        self.pipeline.flush(time.time())
        self._save_counters()

    def _tick(self) -> None:
        """Merge the pending latest state when `latest_save_s` has passed and tell the
        server's live publisher what moved. Run after every commit as well as on the live
        tick: a sample's latest state is saved and announced right after the commit that
        acked it once the save is due, rather than at the next tick (which cost it up to
        one more live interval on its way to a page)."""
        self.pipeline.flush(time.time())
        changed = self.pipeline.take_changed()
        if changed:
            self.send(frames.CHANGED, orjson.dumps(changed))

    def _save_counters(self) -> None:
        """This writer's counters, cumulative since it started, for /metrics. Best effort:
        a database that is away costs nothing but a late figure."""
        counters = self.pipeline.counters
        values = [getattr(counters, f) for f in COUNTER_FIELDS]
        params = [self.name, self.started_at, time.time(), *values]
        try:
            self.pipeline.db.transaction(lambda tx: tx.execute(SAVE_COUNTERS, params))
        except Exception as exc:
            log.warning("could not save the ingest counters: %s", exc)

    def _revalidate(self) -> None:
        try:
            revoked = self.pipeline.revoked_connections()
        except Exception as exc:  # the database may be away: try again later
            log.warning("token revalidation failed: %s", exc)
            return
        if revoked:
            self.send(frames.RESULTS, _encode(revoked))

    def _read_round(self) -> bool:
        """Read what is there, and more while the round is small and young (up to
        `ROUND_LINGER_S`); process it. False when the server has gone."""
        deadline = time.monotonic() + ROUND_LINGER_S
        items: list[tuple[int, int, bytes]] = []
        while True:
            if not self._read_available():
                return False
            items += frames.split_frames(self.buf)
            batches = [payload for kind, _, payload in items if kind == frames.BATCH]
            if len(batches) >= ROUND_BATCHES or sum(map(len, batches)) >= MAX_READ:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.sock], [], [], remaining)[0]:
                break
        self._process(items)
        return True

    def _read_available(self) -> bool:
        """Append what the socket holds now to the buffer; False when the server has gone."""
        self.sock.setblocking(False)
        try:
            while len(self.buf) < MAX_READ:
                try:
                    chunk = self.sock.recv(1 << 20)
                except BlockingIOError:
                    break
                if not chunk:
                    return False
                self.buf += chunk
        finally:
            self.sock.setblocking(True)
        return True

    def _process(self, items: list[tuple[int, int, bytes]]) -> None:
        batches: list[tuple[int, bytes]] = []
        byes: list[int] = []
        for kind, conn_id, payload in items:
            if kind == frames.BATCH:
                batches.append((conn_id, payload))
            elif kind == frames.HELLO:
                hello = orjson.loads(payload)
                self.pipeline.hello(
                    conn_id, hello["source"], int(hello["site_id"]), hello.get("token", "")
                )
            elif kind == frames.BYE:
                byes.append(conn_id)
        if batches:
            self.send(frames.RESULTS, _encode(self.pipeline.process(batches, time.time())))
            self._tick()  # saves the latest state if it is due, and says what moved
        for conn_id in byes:
            self.pipeline.bye(conn_id)


def _encode(results: list[Result]) -> bytes:
    return orjson.dumps([[r.conn_id, r.seq, r.code, r.error] for r in results])


def _ensure_partitions(db: Database) -> None:
    """PostgreSQL: make sure the raw tables have partitions from this hour to a day ahead,
    so this writer can store what it acks even if the beat's `fleet.partitions` has not run.
    Best effort: a database that is away is the first commit's problem (503s), not start's."""
    try:
        made = ensure_raw_ahead(db, time.time())
    except Exception as exc:
        log.warning("could not make the raw time partitions at start: %s", exc)
        return
    if made:
        log.info("made %d raw time partitions at start", len(made))


def main(argv: list[str]) -> int:
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    sock = socket.socket(fileno=int(argv[1]))
    # Everything arrives from the server's validated settings (fleet/ingest/link.py).
    config = orjson.loads(os.environ["FLEETWATCH_CHILD_CONFIG"])
    db = open_db(config["db"], lock_timeout_ms=config["pg_lock_timeout_ms"])
    pipeline = IngestPipeline(
        db, save_interval_s=config["latest_save_s"], raw_keep_s=config["raw_keep_s"]
    )
    loop = ChildLoop(sock, pipeline, config["live_interval_s"], config["revalidate_s"])
    settle_gc()

    def stop(signum: int, frame: Any) -> None:
        loop.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when we stop
    try:
        loop.run()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
