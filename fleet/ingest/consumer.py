"""The WebSocket ingest endpoint: `/ws/ingest/v1`.

Deliberately dumb and lean: it authenticates once, hands each frame's bytes to
the writer unparsed, and sends back what the writer answers. `dispatch` skips
Channels' per-message `aclose_old_connections()` thread hop, which halves
throughput (ingest-feasibility.md); the only ORM call, the token lookup, goes
through `database_sync_to_async`, which closes stale connections itself.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from agents.protocol import CLOSE_FORBIDDEN, CLOSE_UNAUTHORIZED, MAX_BATCH_BYTES
from fleet.ingest.auth import SourceIdentity, authenticate_source, bearer_from_headers
from fleet.ingest.writer import IngestWriter, get_pool

log = logging.getLogger("fleet.ingest")

CLOSE_WRITER_FAILED = 1011


class LeanDispatchMixin:
    async def dispatch(self, message: dict[str, Any]) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


class IngestConsumer(LeanDispatchMixin, AsyncWebsocketConsumer):
    channel_layer_alias = "none"  # no channel layer: nothing is ever sent *to* an agent

    identity: SourceIdentity | None = None
    writer: IngestWriter | None = None
    conn_id = 0
    closing = False  # once we close, later answers for this connection are dropped

    async def connect(self) -> None:
        token = bearer_from_headers(self.scope.get("headers", ()))
        self.identity = await database_sync_to_async(authenticate_source)(token)
        await self.accept()
        if self.identity is None:
            # Close after accepting so the agent sees 4401, not a bare HTTP 403.
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        pool = get_pool()
        self.conn_id = pool.next_conn_id()
        self.writer = await pool.writer_for(self.conn_id)
        self.writer.open(self.conn_id, self.identity, self)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.writer is None:
            return
        payload = text_data.encode() if text_data is not None else (bytes_data or b"")
        if len(payload) > MAX_BATCH_BYTES:
            await self._nack(None, 413, "$", f"batch is {len(payload)} bytes; the limit is 1 MiB")
            return
        self.writer.submit(self.conn_id, payload)

    async def disconnect(self, code: int) -> None:
        self.closing = True
        if self.writer is not None:
            self.writer.close(self.conn_id)
            self.writer = None

    async def writer_result(self, seq: int | None, code: int, error: dict[str, Any] | None) -> None:
        # An agent pipelines batches, so one commit can answer several of them: after
        # the first answer that closes the connection, the rest have nowhere to go.
        if self.closing:
            return
        if code == 0:
            await self.send(text_data=f'{{"ack":{seq}}}')
        elif code == 403:
            await self.send(text_data=orjson.dumps({"nack": seq, "error": error}).decode())
            await self._close(CLOSE_FORBIDDEN)
        elif code == 401:  # the token was revoked (re-enrolled, or by an admin)
            await self._close(CLOSE_UNAUTHORIZED)
        elif code >= 500:
            await self._close(CLOSE_WRITER_FAILED)
        else:
            await self.send(text_data=orjson.dumps({"nack": seq, "error": error}).decode())

    async def writer_lost(self) -> None:
        self.writer = None
        if not self.closing:
            await self._close(CLOSE_WRITER_FAILED)

    async def _close(self, code: int) -> None:
        self.closing = True
        if self.writer is not None:
            self.writer.close(self.conn_id)
            self.writer = None
        await self.close(code=code)

    async def _nack(self, seq: int | None, code: int, field: str, reason: str) -> None:
        error = {"code": code, "field": field, "reason": reason}
        await self.send(text_data=orjson.dumps({"nack": seq, "error": error}).decode())
