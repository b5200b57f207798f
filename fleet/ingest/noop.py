"""Reference consumers for bench/ingest.py (routed only with FLEETWATCH_BENCH_ROUTES=1).

- NoopIngestConsumer: the ingest consumer's own machinery (lean dispatch, no
  channel layer) that parses each batch and acks it at once, storing nothing:
  the transport ceiling the real path is measured against.
- StockNoopConsumer: a stock Channels AsyncWebsocketConsumer doing the same.
"""

from __future__ import annotations

import orjson
from channels.generic.websocket import AsyncWebsocketConsumer

from fleet.ingest.consumer import LeanDispatchMixin


class NoopIngestConsumer(LeanDispatchMixin, AsyncWebsocketConsumer):
    channel_layer_alias = "none"

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        batch = orjson.loads(text_data if text_data is not None else bytes_data or b"{}")
        await self.send(text_data=f'{{"ack":{batch["seq"]}}}')


class StockNoopConsumer(AsyncWebsocketConsumer):
    channel_layer_alias = "none"

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        batch = orjson.loads(text_data if text_data is not None else bytes_data or b"{}")
        await self.send(text_data=f'{{"ack":{batch["seq"]}}}')
