"""The WebSocket ingest endpoint: `/ws/ingest/v1`.

Deliberately dumb and lean: it authenticates once, hands each frame's bytes to the
ingest child unparsed, and sends back what the child answers. `dispatch` skips
Channels' per-message `aclose_old_connections()` thread hop, which halves
throughput (docs/reference/ingest-feasibility.md); the only ORM call, the token lookup, goes
through `database_sync_to_async`, which closes stale connections itself.

Backpressure: at most `MAX_IN_FLIGHT` batches of one connection are with the
child at a time; past that the consumer stops taking frames until answers come
back, which stops the server reading that agent's socket. Answers are sent by a
sender of this connection's own, so an agent that stops reading delays only itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

import orjson
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.db import DatabaseError

from agents.protocol import CLOSE_FORBIDDEN, CLOSE_UNAUTHORIZED, MAX_BATCH_BYTES
from fleet.ingest import guard
from fleet.ingest.auth import SourceIdentity, authenticate_source, bearer_from_headers
from fleet.ingest.eager import run_eagerly
from fleet.ingest.link import IngestLink, get_pool
from fleet.ingest.rejections import client_from_scope, log_rejection

log = logging.getLogger("fleet.ingest")

CLOSE_RETRY = 1011  # storage unavailable or the child failed: reconnect and resend
CLOSE_TRY_LATER = 1013  # this client failed too many token checks (fleet/ingest/guard.py)
# Batches of one connection with the child at once (docs/protocol.md); the agent's own
# window is 32, so a well-behaved agent never waits here.
MAX_IN_FLIGHT = 64
# Answers waiting for an agent that does not read them: past this, stop taking its frames.
MAX_UNSENT = 256


class LeanDispatchMixin:
    async def dispatch(self, message: dict[str, Any]) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


def ack_frame(seq: int | None, refused: dict[str, Any] | None = None) -> str:
    """`{"ack": seq, "t": server time}`: the agent measures its clock offset from `t`.
    `refused` names a part of the batch that was not stored (docs/protocol.md); the
    writer has counted it for the admin already."""
    if refused is not None:
        return orjson.dumps({"ack": seq, "t": round(time.time(), 3), "refused": refused}).decode()
    return f'{{"ack":{seq},"t":{time.time():.3f}}}'


class IngestConsumer(LeanDispatchMixin, AsyncWebsocketConsumer):
    channel_layer_alias = "none"  # no channel layer: nothing is ever sent *to* an agent

    identity: SourceIdentity | None = None
    link: IngestLink | None = None
    conn_id = 0
    closing = False  # once we close, later answers for this connection are dropped

    async def connect(self) -> None:
        token = bearer_from_headers(self.scope.get("headers", ()))
        address = self._address()
        if guard.auth_failures.retry_after_s(address, guard.clock()):
            await self.accept()
            await self.close(code=CLOSE_TRY_LATER)  # no token checked for a guessing client
            return
        try:
            self.identity = await database_sync_to_async(authenticate_source)(token)
        except DatabaseError:
            log.warning("token check failed: the database is unavailable")
            await self.accept()
            await self.close(code=CLOSE_RETRY)  # the agent backs off and reconnects
            return
        await self.accept()
        if self.identity is None:
            if token:
                guard.auth_failures.note(address, guard.clock())
            reason = "unknown or revoked source token"
            log_rejection("WebSocket ingest", self._client(), None, 401, "authorization", reason)
            # Close after accepting so the agent sees 4401, not a bare HTTP 403.
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        self.in_flight = 0
        self._room = asyncio.Event()
        self._outbox: deque[tuple[str | None, int]] = deque()  # (frame text, or None; close code)
        self._sender: asyncio.Task[None] | None = None  # keeps a waiting sender alive
        self._sending = False
        pool = get_pool()
        self.conn_id = pool.next_conn_id()
        try:
            self.link = await pool.link_for(self.conn_id)
        except Exception:
            log.exception("no ingest child for a new connection")
            await self.close(code=CLOSE_RETRY)
            return
        self.link.open(self.conn_id, self.identity, self)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.link is None:
            return
        payload = text_data.encode() if text_data is not None else (bytes_data or b"")
        if len(payload) > MAX_BATCH_BYTES:
            error = {"code": 413, "field": "$", "reason": "batch larger than 1 MiB"}
            self._log_refusal(413, error)
            self._queue(orjson.dumps({"nack": None, "error": error}).decode())
            return
        while (
            self.in_flight >= MAX_IN_FLIGHT or len(self._outbox) >= MAX_UNSENT
        ) and self.link is not None:
            self._room.clear()
            await self._room.wait()
        if self.link is None:
            return
        self.in_flight += 1
        if self.link.submit(self.conn_id, payload):
            await self.link.drain()

    async def disconnect(self, code: int) -> None:
        self.closing = True
        if self.link is not None:
            self.link.close(self.conn_id)
            self.link = None
        if hasattr(self, "_room"):
            self._room.set()

    # -- answers from the child (sync: they only queue) ---------------------------
    def answer(self, seq: int | None, code: int, error: dict[str, Any] | None) -> None:
        if code != 401:
            self.in_flight = max(0, self.in_flight - 1)
            self._room.set()
        # An agent pipelines batches, so one commit can answer several of them: after
        # the first answer that closes the connection, the rest have nowhere to go.
        if self.closing:
            return
        if code == 0:
            self._queue(ack_frame(seq, error))
            return
        if code < 500:
            self._log_refusal(code, error)
        if code == 403:
            self._queue(orjson.dumps({"nack": seq, "error": error}).decode())
            self._close_after(CLOSE_FORBIDDEN)
        elif code == 401:  # the token was revoked (re-enrolled, or by an admin)
            self._close_after(CLOSE_UNAUTHORIZED)
        elif code >= 500:
            # Transient: the agent must resend, and a nack would make it drop the batch.
            self._close_after(CLOSE_RETRY)
        else:
            self._queue(orjson.dumps({"nack": seq, "error": error}).decode())

    def _address(self) -> str:
        client = self.scope.get("client")
        return str(client[0]) if isinstance(client, (list, tuple)) and client else "?"

    def _client(self) -> str:
        return client_from_scope(self.scope)

    def _log_refusal(self, code: int, error: dict[str, Any] | None) -> None:
        source = self.identity.source if self.identity is not None else None
        field, reason = (error or {}).get("field", "$"), (error or {}).get("reason", "")
        if code == 401:
            reason = reason or "the source token was revoked"
        log_rejection("WebSocket ingest", self._client(), source, code, field, reason)

    def link_lost(self) -> None:
        self.link = None
        self._room.set()
        if not self.closing:
            self._close_after(CLOSE_RETRY)

    def _close_after(self, code: int) -> None:
        self.closing = True
        if self.link is not None:
            self.link.close(self.conn_id)
            self.link = None
        self._room.set()
        self._outbox.append((None, code))
        self._wake_sender()

    def _queue(self, text: str) -> None:
        self._outbox.append((text, 0))
        self._wake_sender()

    def _wake_sender(self) -> None:
        if not self._sending:
            self._sending = True
            # Sent right here when the socket has room; a task only if it must wait.
            self._sender = run_eagerly(self._send_outbox())

    async def _send_outbox(self) -> None:
        # One sender per connection at a time; a slow reader blocks only this task.
        try:
            while self._outbox:
                text, close_code = self._outbox.popleft()
                if text is None:
                    await self.close(code=close_code)
                    self._outbox.clear()
                    return
                await self.send(text_data=text)
                if len(self._outbox) < MAX_UNSENT:
                    self._room.set()
        except Exception:
            log.debug("connection %s went away while answering", self.conn_id, exc_info=True)
            self._outbox.clear()
        finally:
            self._sending = False
            self._sender = None
