"""The uvicorn options every Fleetwatch server runs with: the demo runner, the test
server and the documented production command (docs/operations.md; a test keeps the
three in step).

- `--ws-max-size`: a WebSocket message just above the protocol's 1 MiB batch limit is
  the most uvicorn reads; a larger one closes the connection at once (1009) instead of
  being buffered up to uvicorn's 16 MiB default. Between 1 MiB and this cap the
  consumer answers a 413 nack and the connection lives on.
- `--timeout-keep-alive`: an idle keep-alive HTTP connection is closed after this.
- `--ws-ping-interval`/`--ws-ping-timeout`: a WebSocket peer that stops answering pings
  (a half-open connection: the node lost power) is dropped.

uvicorn does not time out a connection that never completes its request headers: the
proxy in front does (`client_header_timeout`, docs/operations.md), so uvicorn listens
on 127.0.0.1 only.
"""

from __future__ import annotations

from agents.protocol import MAX_BATCH_BYTES

WS_MAX_SIZE = MAX_BATCH_BYTES + 64 * 1024
KEEP_ALIVE_S = 5
WS_PING_INTERVAL_S = 20
WS_PING_TIMEOUT_S = 20

UVICORN_LIMITS: tuple[str, ...] = (
    "--ws-max-size",
    str(WS_MAX_SIZE),
    "--timeout-keep-alive",
    str(KEEP_ALIVE_S),
    "--ws-ping-interval",
    str(WS_PING_INTERVAL_S),
    "--ws-ping-timeout",
    str(WS_PING_TIMEOUT_S),
)
