"""Framing between a server process (`link.py`) and its ingest child process (`child.py`).

Each frame is a 9-byte header `<length u32, type u8, conn_id u32>` and a payload.
Server → writer: HELLO (JSON {source, site_id}), BATCH (the agent's raw JSON
bytes, unparsed: parsing happens in the writer, off the event loop's GIL),
BYE. Child → server: READY, RESULTS (JSON [[conn_id, seq, code, error], …]
once per commit), CHANGED (JSON {kind: [[entity ids…], …]}: whose latest state was saved).
"""

from __future__ import annotations

import struct

HEADER = struct.Struct("<IBI")

HELLO = ord("H")
BATCH = ord("B")
BYE = ord("X")
READY = ord("R")
RESULTS = ord("A")
CHANGED = ord("L")


def frame(kind: int, conn_id: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), kind, conn_id) + payload


def split_frames(buf: bytearray) -> list[tuple[int, int, bytes]]:
    """Remove and return every complete frame at the start of `buf`."""
    out: list[tuple[int, int, bytes]] = []
    pos = 0
    size = HEADER.size
    end = len(buf)
    while end - pos >= size:
        length, kind, conn_id = HEADER.unpack_from(buf, pos)
        if end - pos - size < length:
            break
        start = pos + size
        out.append((kind, conn_id, bytes(buf[start : start + length])))
        pos = start + length
    if pos:
        del buf[:pos]
    return out
