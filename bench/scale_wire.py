"""A lean WebSocket client for bench/scale_agents.py (RFC 6455, text frames only).

The load generator shares the two cores with the servers it measures: at 800 GPUs the
`websockets` library spent 530–570 µs of CPU per batch sent and acknowledged, this client
406–474 µs (94 µs at 10,000 GPUs, more sends per wake-up). It does the least the
protocol asks: an HTTP upgrade, client frames masked with a zero key
(legal: the server XORs with zeros), server frames parsed from one buffer, pings
answered, close noticed. No extensions, no fragmentation on send.
"""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from collections.abc import Callable

ZERO_MASK = b"\x00\x00\x00\x00"
TEXT, CLOSE, PING, PONG = 0x1, 0x8, 0x9, 0xA


def frame(opcode: int, payload: bytes) -> bytes:
    """A final, masked client frame (the mask key is zero, so the payload goes as is)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return head + ZERO_MASK + payload


class WireClient(asyncio.Protocol):
    """One connection: `on_message(payload)` for each server text frame."""

    def __init__(self, on_message: Callable[[bytes], None]) -> None:
        self.on_message = on_message
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.upgraded: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed = False
        self.partial = bytearray()  # a fragmented message being reassembled

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.upgraded.done():
            self.upgraded.set_exception(ConnectionError(f"connection lost: {exc!r}"))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.upgraded.done():
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            status = bytes(self.buffer[: self.buffer.find(b"\r\n")])
            del self.buffer[: end + 4]
            if b" 101 " not in status + b" ":
                self.upgraded.set_exception(ConnectionError(status.decode(errors="replace")))
                return
            self.upgraded.set_result(None)
        self._frames()

    def _frames(self) -> None:
        buf = self.buffer
        while len(buf) >= 2:
            b0, b1 = buf[0], buf[1]
            n, at = b1 & 0x7F, 2
            if n == 126:
                if len(buf) < 4:
                    return
                n, at = struct.unpack_from("!H", buf, 2)[0], 4
            elif n == 127:
                if len(buf) < 10:
                    return
                n, at = struct.unpack_from("!Q", buf, 2)[0], 10
            if b1 & 0x80:
                at += 4  # a masked server frame is a protocol error; skip the key
            if len(buf) < at + n:
                return
            payload = bytes(buf[at : at + n])
            del buf[: at + n]
            self._handle(b0 & 0x0F, bool(b0 & 0x80), payload)

    def _handle(self, opcode: int, final: bool, payload: bytes) -> None:
        if opcode == PING:
            self.send(PONG, payload)
        elif opcode == CLOSE:
            self.send(CLOSE, payload[:2])
            self.closed = True
            if self.transport is not None:
                self.transport.close()
        elif opcode in (TEXT, 0x2, 0x0):
            if not final:
                self.partial += payload
            elif self.partial:
                self.on_message(bytes(self.partial + payload))
                self.partial.clear()
            else:
                self.on_message(payload)

    def send(self, opcode: int, payload: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame(opcode, payload))

    def send_text(self, payload: bytes) -> bool:
        if self.closed or self.transport is None or self.transport.is_closing():
            return False
        self.transport.write(frame(TEXT, payload))
        return True

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.send(CLOSE, struct.pack("!H", 1000))
            self.transport.close()
        self.closed = True


async def connect(
    host: str, port: int, path: str, token: str, on_message: Callable[[bytes], None]
) -> WireClient:
    loop = asyncio.get_running_loop()
    _, client = await loop.create_connection(lambda: WireClient(on_message), host, port)
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Authorization: Bearer {token}\r\n\r\n"
    )
    assert client.transport is not None
    client.transport.write(request.encode())
    await asyncio.wait_for(client.upgraded, 60)
    return client
