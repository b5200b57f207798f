"""A WebSocket client that sends and never reads: an agent whose socket stalled.

The usual clients read incoming frames on a thread of their own, so they cannot
stand for a peer that stops reading; this one does the handshake and writes frames
on a plain socket with a tiny receive buffer, and reads nothing after the handshake.
"""

from __future__ import annotations

import base64
import os
import socket
import struct


def _frame(text: str) -> bytes:
    payload = text.encode()
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x81, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x81, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + masked


class StalledWebSocket:
    def __init__(self, host: str, port: int, path: str, token: str) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        self.sock.connect((host, port))
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {token}\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("handshake failed")
            answer += chunk
        if b" 101 " not in answer.split(b"\r\n", 1)[0]:
            raise ConnectionError(answer.decode(errors="replace"))

    def send(self, text: str, timeout: float = 5.0) -> bool:
        """Send a frame; False when the server stopped reading us (its backpressure)."""
        self.sock.settimeout(timeout)
        try:
            self.sock.sendall(_frame(text))
            return True
        except (TimeoutError, OSError):
            return False

    def close(self) -> None:
        self.sock.close()
