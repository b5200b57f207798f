"""The ingest writer process: `python -m fleet.ingest.writer_process FD`.

One per server process (two on PostgreSQL if configured). It owns the durable
write path so that parsing, validation and the database commit run on their own
core and GIL, while the server's event loop only moves bytes (the design that
met the throughput bar in reference/ingest-feasibility.md).

Natural group commit: it takes everything readable, commits once, answers every
batch in one RESULTS frame, and repeats; no linger timer. Every
`FLEETWATCH_LIVE_INTERVAL_S` it writes the latest-state tables and sends a LIVE
frame for the server to push to browsers. It does not start Django: the server
passes the database settings in `FLEETWATCH_WRITER_DB`.
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

from fleet.ingest import frames
from fleet.ingest.store import open_store
from fleet.ingest.writer_core import Result, WriterCore

log = logging.getLogger("fleet.ingest.writer")

MAX_READ = 4 << 20  # bytes taken per round: bounds one commit's size and latency
REVALIDATE_S = float(os.environ.get("FLEETWATCH_REVALIDATE_S", "5"))  # revoked tokens


class WriterLoop:
    def __init__(self, sock: socket.socket, core: WriterCore, live_interval_s: float) -> None:
        self.sock = sock
        self.core = core
        self.live_interval_s = live_interval_s
        self.buf = bytearray()
        self.stopping = False

    def send(self, kind: int, payload: bytes) -> None:
        self.sock.sendall(frames.frame(kind, 0, payload))

    def run(self) -> None:
        self.send(frames.READY, b"")
        next_flush = time.monotonic() + self.live_interval_s
        next_check = time.monotonic() + REVALIDATE_S
        while not self.stopping:
            timeout = max(0.0, next_flush - time.monotonic())
            readable, _, _ = select.select([self.sock], [], [], timeout)
            if readable and not self._read_round():
                break
            if time.monotonic() >= next_flush:
                self._flush()
                next_flush = time.monotonic() + self.live_interval_s
            if time.monotonic() >= next_check:
                self._revalidate()
                next_check = time.monotonic() + REVALIDATE_S
        self._flush()
        self.core.save(time.time())  # the latest state on disk matches what was acked

    def _revalidate(self) -> None:
        try:
            revoked = self.core.revoked_connections()
        except Exception:
            log.exception("token revalidation failed")
            return
        if revoked:
            payload = [[r.conn_id, r.seq, r.code, r.error] for r in revoked]
            self.send(frames.RESULTS, orjson.dumps(payload))

    def _read_round(self) -> bool:
        """Read what is there, process it; False when the server has gone."""
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
        self._process(frames.split_frames(self.buf))
        return True

    def _process(self, items: list[tuple[int, int, bytes]]) -> None:
        batches: list[tuple[int, bytes]] = []
        byes: list[int] = []
        for kind, conn_id, payload in items:
            if kind == frames.BATCH:
                batches.append((conn_id, payload))
            elif kind == frames.HELLO:
                hello = orjson.loads(payload)
                self.core.hello(
                    conn_id, hello["source"], int(hello["site_id"]), hello.get("token", "")
                )
            elif kind == frames.BYE:
                byes.append(conn_id)
        if batches:
            self.send(frames.RESULTS, orjson.dumps(self._results(batches)))
        for conn_id in byes:
            self.core.bye(conn_id)

    def _results(self, batches: list[tuple[int, bytes]]) -> list[list[Any]]:
        try:
            results = self.core.process(batches, time.time())
        except Exception as exc:
            # Nothing of this round was committed: tell the server, whose agents resend.
            log.exception("ingest commit failed")
            reason = f"storage failed: {exc.__class__.__name__}"
            results = [
                Result(cid, None, 503, {"code": 503, "field": "$", "reason": reason})
                for cid, _ in batches
            ]
        return [[r.conn_id, r.seq, r.code, r.error] for r in results]

    def _flush(self) -> None:
        try:
            update = self.core.flush(time.time())
        except Exception:
            log.exception("latest-state flush failed")
            return
        if update:
            self.send(frames.LIVE, orjson.dumps(update))


def main(argv: list[str]) -> int:
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    sock = socket.socket(fileno=int(argv[1]))
    db = orjson.loads(os.environ["FLEETWATCH_WRITER_DB"])
    interval = float(os.environ.get("FLEETWATCH_LIVE_INTERVAL_S", "0.5"))
    core = WriterCore(open_store(db))
    core.start()
    loop = WriterLoop(sock, core, interval)

    def stop(signum: int, frame: Any) -> None:
        loop.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when we stop
    try:
        loop.run()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        core.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
