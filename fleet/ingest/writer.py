"""The server side of the ingest writer: spawns the writer process, moves raw
batches to it and its answers back to the right connection.

The event loop does no parsing here: a batch's bytes are appended to an output
buffer that is flushed to the writer's socket once per loop iteration, and each
commit's answers arrive as one frame and are sent from one task.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import subprocess
import sys
from typing import Any, Protocol

import orjson
from django.conf import settings

from fleet.ingest import frames
from fleet.ingest.auth import SourceIdentity
from fleet.live import publish_fleet_update

log = logging.getLogger("fleet.ingest")


class WriterHandler(Protocol):
    async def writer_result(self, seq: int | None, code: int, error: dict[str, Any] | None) -> None:
        """The writer's answer for one batch of this connection."""

    async def writer_lost(self) -> None:
        """The writer died: unacknowledged batches must be resent."""


class IngestWriter:
    """One writer process and the connections pinned to it."""

    def __init__(self, db: dict[str, Any], live_interval_s: float) -> None:
        self.db = db
        self.live_interval_s = live_interval_s
        self.handlers: dict[int, WriterHandler] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._starting: asyncio.Future[None] | None = None
        self._reader_task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._writer is not None

    async def ensure_started(self) -> None:
        if self._writer is not None:
            return
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        try:
            await asyncio.shield(self._starting)
        finally:
            if self._starting is not None and self._starting.done():
                self._starting = None

    async def _start(self) -> None:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        env["FLEETWATCH_WRITER_DB"] = orjson.dumps(self.db, default=str).decode()
        env["FLEETWATCH_LIVE_INTERVAL_S"] = str(self.live_interval_s)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fleet.ingest.writer_process", str(child.fileno())],
            pass_fds=[child.fileno()],
            env=env,
        )
        child.close()
        reader, writer = await asyncio.open_connection(sock=parent)
        header = await reader.readexactly(frames.HEADER.size)
        _, kind, _ = frames.HEADER.unpack(header)
        if kind != frames.READY:
            raise RuntimeError("ingest writer did not start")
        self._writer = writer
        self._reader_task = asyncio.ensure_future(self._read_loop(reader))
        log.info("ingest writer started (pid %s)", self.proc.pid)

    def open(self, conn_id: int, identity: SourceIdentity, handler: WriterHandler) -> None:
        self.handlers[conn_id] = handler
        hello = orjson.dumps(
            {"source": identity.source, "site_id": identity.site_id, "token": identity.token_hash}
        )
        self._send(frames.frame(frames.HELLO, conn_id, hello))

    def submit(self, conn_id: int, payload: bytes) -> None:
        self._send(frames.frame(frames.BATCH, conn_id, payload))

    def close(self, conn_id: int) -> None:
        if self.handlers.pop(conn_id, None) is not None and self._writer is not None:
            self._send(frames.frame(frames.BYE, conn_id))

    def _send(self, data: bytes) -> None:
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._writer is None or not self._out:
            self._out.clear()
            return
        self._writer.write(b"".join(self._out))
        self._out.clear()

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                header = await reader.readexactly(frames.HEADER.size)
                length, kind, _ = frames.HEADER.unpack(header)
                payload = await reader.readexactly(length)
                if kind == frames.RESULTS:
                    await self._dispatch(orjson.loads(payload))
                elif kind == frames.LIVE:
                    await publish_fleet_update(orjson.loads(payload))
        except (asyncio.IncompleteReadError, ConnectionError):
            log.error("ingest writer exited (code %s)", self.proc.poll() if self.proc else None)
        except Exception:
            log.exception("ingest writer link failed")
        await self._lost()

    async def _dispatch(self, results: list[list[Any]]) -> None:
        for conn_id, seq, code, error in results:
            handler = self.handlers.get(conn_id)
            if handler is None:
                continue
            try:
                await handler.writer_result(seq, code, error)
            except Exception:
                # One connection's failure (it went away mid-send) is that connection's
                # problem: it must not be taken for the writer link failing.
                log.warning("could not answer connection %s", conn_id, exc_info=True)
                self.close(conn_id)

    async def _lost(self) -> None:
        writer, self._writer = self._writer, None
        handlers = list(self.handlers.values())
        self.handlers.clear()
        if writer is not None:
            writer.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
        for handler in handlers:
            try:
                await handler.writer_lost()
            except Exception:
                log.warning("could not close a connection after the writer failed", exc_info=True)

    async def stop(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self.proc is not None:
            await asyncio.to_thread(self.proc.wait, 30)


class WriterPool:
    """The writers of this server process; each connection is pinned to one of them."""

    def __init__(self, count: int, db: dict[str, Any], live_interval_s: float) -> None:
        self.writers = [IngestWriter(db, live_interval_s) for _ in range(count)]
        self._ids = itertools.count(1)

    def next_conn_id(self) -> int:
        return next(self._ids)

    async def writer_for(self, conn_id: int) -> IngestWriter:
        writer = self.writers[conn_id % len(self.writers)]
        await writer.ensure_started()
        return writer


_pool: WriterPool | None = None


def get_pool() -> WriterPool:
    global _pool
    if _pool is None:
        _pool = WriterPool(
            settings.INGEST_WRITERS, dict(settings.DATABASES["default"]), settings.LIVE_INTERVAL_S
        )
    return _pool
