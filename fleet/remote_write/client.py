"""One remote-write request to the receiver, and what its answer means for the cursor.

The spec (https://prometheus.io/docs/specs/prw/remote_write_spec/, "Retries & Backoff"):
2xx stored; 4xx invalid and never retried — except 429, which a sender may retry; 5xx
retried with backoff. A connection that fails or times out is retried like a 5xx. The
response body is logged as-is, never parsed.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass

import requests

from fleet.remote_write.wire import HEADERS
from fleetwatch.remote_write_settings import RemoteWrite

__all__ = ("Answer", "Outcome", "post")

# How much of a refusal's body the cursor and the log keep.
_BODY_KEPT = 300


class Outcome(enum.Enum):
    STORED = "stored"  # 2xx: move the cursor
    REFUSED = "refused"  # 4xx other than 429: count the samples dropped, move the cursor
    RETRY = "retry"  # 5xx, 429, no connection: keep the cursor, back off


@dataclass(frozen=True, slots=True)
class Answer:
    outcome: Outcome
    status: int | None  # None: no HTTP answer
    detail: str


_local = threading.local()


def _session() -> requests.Session:
    """One keep-alive session per thread (the spec's intended "streaming": reused
    connections)."""
    session: requests.Session | None = getattr(_local, "session", None)
    if session is None:
        session = requests.Session()
        _local.session = session
    return session


def classify(status: int) -> Outcome:
    if 200 <= status < 300:
        return Outcome.STORED
    if status == 429 or status >= 500:
        return Outcome.RETRY
    return Outcome.REFUSED


def post(config: RemoteWrite, body: bytes) -> Answer:
    """POST one snappy-compressed WriteRequest to the receiver."""
    headers = {**config.headers(), **HEADERS}
    try:
        response = _session().post(config.url, data=body, headers=headers, timeout=config.timeout_s)
    except requests.RequestException as exc:
        return Answer(Outcome.RETRY, None, f"{type(exc).__name__}: {exc}"[:_BODY_KEPT])
    detail = response.text[:_BODY_KEPT].strip()
    return Answer(classify(response.status_code), response.status_code, detail)
