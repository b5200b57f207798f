"""Refusals, logged so an operator can tell a misconfigured agent from an attack.

One line per refusal with the transport, the client's address (and, from an untrusted
peer, what it says it forwarded for), the source that was attempted, the status, the
field and the reason. Rate-limited per process: a flood of bad requests writes at most
`MAX_LINES` lines per `WINDOW_S`, then one line saying how many were not logged. Every
refusal, logged or not, is also counted per source for the admin (fleet/ingest/tally.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping

from fleet.ingest.tally import tally

log = logging.getLogger("fleet.ingest.rejections")

MAX_LINES = 60
WINDOW_S = 60.0


class _Budget:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.window_start = 0.0
        self.logged = 0
        self.suppressed = 0

    def take(self, now: float) -> tuple[bool, int]:
        """(may log, refusals not logged in the window that just ended)."""
        with self.lock:
            if now - self.window_start >= WINDOW_S:
                dropped, self.suppressed = self.suppressed, 0
                self.window_start, self.logged = now, 0
            else:
                dropped = 0
            if self.logged < MAX_LINES:
                self.logged += 1
                return True, dropped
            self.suppressed += 1
            return False, dropped


_budget = _Budget()
_clock = time.monotonic


def client_from_meta(meta: Mapping[str, object]) -> str:
    address = str(meta.get("REMOTE_ADDR") or "?")
    forwarded = meta.get("HTTP_X_FORWARDED_FOR")
    return _with_forwarded(address, str(forwarded) if forwarded else None)


def client_from_scope(scope: Mapping[str, object]) -> str:
    client = scope.get("client")
    address = str(client[0]) if isinstance(client, (list, tuple)) and client else "?"
    headers = scope.get("headers")
    if isinstance(headers, Iterable):
        for name, value in headers:
            if name == b"x-forwarded-for":
                return _with_forwarded(address, value.decode("latin-1"))
    return address


def _with_forwarded(address: str, forwarded: str | None) -> str:
    """uvicorn already takes the client from `X-Forwarded-For` when the peer is a trusted
    proxy (`--forwarded-allow-ips`, 127.0.0.1 by default); otherwise the header is shown
    beside the address, as sent."""
    if not forwarded or forwarded == address:
        return address
    return f"{address} (forwarded for {forwarded[:200]!r})"


def log_rejection(
    transport: str, client: str, source: object, status: int, field: object, reason: object
) -> None:
    tally.add(
        "" if source is None else str(source), transport, status, str(field), str(reason), client
    )
    ok, dropped = _budget.take(_clock())
    if dropped:
        log.warning("%d more rejections in the last %g s were not logged", dropped, WINDOW_S)
    if not ok:
        return
    shown = repr(source)[:240] if source is not None else "unknown"
    log.warning(
        "rejected %s from %s source=%s: %s %s: %s",
        transport,
        client,
        shown,
        status,
        field,
        str(reason)[:300],
    )
