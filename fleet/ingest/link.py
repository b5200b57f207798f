"""The server side of ingest: spawns the ingest child process, moves raw batches to
it and its answers back to the right connection.

The event loop does no parsing here: a batch's bytes are appended to an output
buffer flushed to the child's socket once per loop iteration (and `submit` waits
for `drain()` when the child falls behind, which holds back the agents feeding
it). Each commit's answers arrive as one frame; every connection answers from its
own sender (`Answerer`), so one agent that stops reading cannot hold up another's
acks. CHANGED frames go to the live publisher, which never blocks this link: a
Redis that is away costs live pushes, never ingest.
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
from fleet.read.live import get_publisher

log = logging.getLogger("fleet.ingest")

START_TIMEOUT_S = 30.0
BACKED_UP = 4 << 20  # bytes queued for the child before agents are held back


class LinkHandler(Protocol):
    def answer(self, seq: int | None, code: int, error: dict[str, Any] | None) -> None:
        """The child's answer for one batch of this connection. Must not block."""

    def link_lost(self) -> None:
        """The child died: unacknowledged batches must be resent. Must not block."""


class ChildStartFailed(RuntimeError):
    pass


class IngestLink:
    """One ingest child process and the connections pinned to it."""

    child_module = "fleet.ingest.child"
    start_timeout_s = START_TIMEOUT_S

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config  # what the child needs: see child_config()
        self.handlers: dict[int, LinkHandler] = {}
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
        env["FLEETWATCH_CHILD_CONFIG"] = orjson.dumps(self.config, default=str).decode()
        proc = subprocess.Popen(
            [sys.executable, "-m", self.child_module, str(child.fileno())],
            pass_fds=[child.fileno()],
            env=env,
        )
        child.close()
        try:
            reader, writer = await asyncio.open_connection(sock=parent)
            header = await asyncio.wait_for(
                reader.readexactly(frames.HEADER.size), self.start_timeout_s
            )
            if frames.HEADER.unpack(header)[1] != frames.READY:
                raise ChildStartFailed("the ingest child answered something other than READY")
        except (TimeoutError, asyncio.IncompleteReadError, OSError, ChildStartFailed) as exc:
            # Clean up after ourselves: no half-started child, no open socket.
            proc.kill()
            await asyncio.to_thread(proc.wait)
            parent.close()
            raise ChildStartFailed(f"ingest child did not start: {exc!r}") from exc
        self.proc = proc
        self._writer = writer
        self._reader_task = asyncio.ensure_future(self._read_loop(reader))
        log.info("ingest child started (pid %s)", proc.pid)

    def open(self, conn_id: int, identity: SourceIdentity, handler: LinkHandler) -> None:
        self.handlers[conn_id] = handler
        hello = orjson.dumps(
            {"source": identity.source, "site_id": identity.site_id, "token": identity.token_hash}
        )
        self._send(frames.frame(frames.HELLO, conn_id, hello))

    def submit(self, conn_id: int, payload: bytes) -> bool:
        """Queue a batch for the child. True when the child's socket is backed up: the
        caller then awaits `drain()` before taking more from its agent."""
        self._send(frames.frame(frames.BATCH, conn_id, payload))
        writer = self._writer
        return writer is not None and writer.transport.get_write_buffer_size() > BACKED_UP

    async def drain(self) -> None:
        writer = self._writer
        if writer is not None:
            self._flush()
            await writer.drain()

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
        publisher = get_publisher()
        try:
            while True:
                header = await reader.readexactly(frames.HEADER.size)
                length, kind, _ = frames.HEADER.unpack(header)
                payload = await reader.readexactly(length)
                if kind == frames.RESULTS:
                    self._dispatch(orjson.loads(payload))
                elif kind == frames.CHANGED:
                    publisher.note_changed(orjson.loads(payload))
        except (asyncio.IncompleteReadError, ConnectionError):
            log.error("ingest child exited (code %s)", self.proc.poll() if self.proc else None)
        except Exception:
            log.exception("ingest link failed")
        self._lost()

    def _dispatch(self, results: list[list[Any]]) -> None:
        for conn_id, seq, code, error in results:
            handler = self.handlers.get(conn_id)
            if handler is None:
                continue
            try:
                handler.answer(seq, code, error)
            except Exception:
                # One connection's failure is that connection's problem, not the link's.
                log.warning("could not answer connection %s", conn_id, exc_info=True)
                self.close(conn_id)

    def _lost(self) -> None:
        writer, self._writer = self._writer, None
        handlers = list(self.handlers.values())
        self.handlers.clear()
        if writer is not None:
            writer.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
        for handler in handlers:
            try:
                handler.link_lost()
            except Exception:
                log.warning("could not close a connection after the child failed", exc_info=True)

    async def stop(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self.proc is not None:
            await asyncio.to_thread(self.proc.wait, 30)


class LinkPool:
    """The ingest children of this server process; each connection is pinned to one."""

    def __init__(self, count: int, config: dict[str, Any]) -> None:
        self.links = [IngestLink(config) for _ in range(count)]
        self._ids = itertools.count(1)

    def next_conn_id(self) -> int:
        return next(self._ids)

    async def link_for(self, conn_id: int) -> IngestLink:
        link = self.links[conn_id % len(self.links)]
        await link.ensure_started()
        return link


_pool: LinkPool | None = None


def get_pool() -> LinkPool:
    global _pool
    if _pool is None:
        _pool = LinkPool(settings.INGEST_WRITERS, child_config())
    return _pool


def child_config() -> dict[str, Any]:
    """The ingest child's settings, validated here by Django's settings (fleetwatch/env.py)."""
    return {
        "db": dict(settings.DATABASES["default"]),
        "live_interval_s": settings.LIVE_INTERVAL_S,
        "latest_save_s": settings.LATEST_SAVE_S,
        "revalidate_s": settings.REVALIDATE_S,
        "pg_lock_timeout_ms": settings.PG_LOCK_TIMEOUT_MS,
        "raw_keep_s": settings.RETENTION_RAW_HOURS * 3600.0,
    }
