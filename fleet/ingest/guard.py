"""What the agent endpoints check before they read a body: its media type, and whether
the client has been guessing tokens.

- A POST must carry JSON: `Content-Type: application/json` (parameters such as charset
  allowed) or no Content-Type at all (older agents and `curl --data-binary` without -H);
  anything else is 415 with `Accept-Post: application/json`, before the body is read.
- Failed token checks (401s on enrolment and HTTP ingest) are counted per client
  address; past `settings.AUTH_FAILURES_PER_MIN` in a minute the client gets 429 with
  `Retry-After` until its oldest failure is a minute old, before any token is checked.
  A client that sends good tokens is never slowed. The count is per server process and
  keyed by the address uvicorn reports (the real client behind a trusted proxy:
  `--forwarded-allow-ips`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Mapping

from django.conf import settings

JSON = "application/json"
WINDOW_S = 60.0
MAX_CLIENTS = 10_000  # a flood from many addresses cannot grow this without bound


def is_json_content_type(meta: Mapping[str, object]) -> bool:
    raw = str(meta.get("CONTENT_TYPE") or "").strip()
    if not raw:
        return True
    media = raw.split(";", 1)[0].strip().lower()
    return media == JSON or (media.startswith("application/") and media.endswith("+json"))


class AuthFailures:
    """Failed token checks per client in the last minute (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, deque[float]] = {}

    def retry_after_s(self, client: str, now: float) -> int:
        """0 when `client` may try a token; else whole seconds until it may."""
        limit = settings.AUTH_FAILURES_PER_MIN
        with self._lock:
            times = self._seen.get(client)
            if times is None:
                return 0
            _expire(times, now)
            if len(times) < limit:
                return 0
            return max(1, math.ceil(times[0] + WINDOW_S - now))

    def note(self, client: str, now: float) -> None:
        with self._lock:
            if client not in self._seen and len(self._seen) >= MAX_CLIENTS:
                self._forget_quiet(now)
            times = self._seen.setdefault(client, deque())
            _expire(times, now)
            times.append(now)

    def _forget_quiet(self, now: float) -> None:
        for client in list(self._seen):
            _expire(self._seen[client], now)
            if not self._seen[client]:
                del self._seen[client]
        if len(self._seen) >= MAX_CLIENTS:  # all busy: drop the oldest-keyed one
            del self._seen[next(iter(self._seen))]


def _expire(times: deque[float], now: float) -> None:
    while times and times[0] <= now - WINDOW_S:
        times.popleft()


auth_failures = AuthFailures()
clock = time.monotonic


def client_address(meta: Mapping[str, object]) -> str:
    return str(meta.get("REMOTE_ADDR") or "?")
