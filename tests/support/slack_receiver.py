"""A local HTTP server that answers like a Slack incoming webhook, for delivery tests.

    with SlackReceiver() as slack:
        url = slack.url("/alerts")              # one "channel" per path
        slack.script("/alerts", RATE_LIMITED(2), OK)   # then "ok" for ever
        ...
        slack.received("/alerts")                # bodies and arrival times

Answers are taken in order per path; once a path's script is used up it answers 200 "ok".
An answer may be held (`Answer(delay_s=60)`, or `held(60)`): the request is on record as it
arrives, and the answer is written only after the delay; if the sender hangs up first
(its process was killed) the answer is never written, and `Received.answered` says so.
"""

from __future__ import annotations

import dataclasses
import json
import select
import socket
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: str = "ok"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # hold the answer this long (the request is in flight meanwhile)


OK = Answer()
SERVER_ERROR = Answer(500, "rollup_error")
CHANNEL_NOT_FOUND = Answer(404, "channel_not_found")
CHANNEL_IS_ARCHIVED = Answer(410, "channel_is_archived")
INVALID_BLOCKS = Answer(400, "invalid_blocks")


def rate_limited(retry_after: int) -> Answer:
    return Answer(429, "rate_limited", {"Retry-After": str(retry_after)})


def held(delay_s: float, answer: Answer = OK) -> Answer:
    """`answer`, written only after `delay_s` (or never, if the sender hangs up first)."""
    return dataclasses.replace(answer, delay_s=delay_s)


@dataclass(frozen=True)
class Received:
    path: str
    body: dict[str, Any]
    at: float  # time.time() on arrival
    status: int  # what we answered (or would have: see `answered`)
    answered: bool = False  # the whole answer was written before the sender hung up


class SlackReceiver:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, deque[Answer]] = defaultdict(deque)
        self._received: list[Received] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def script(self, path: str, *answers: Answer) -> None:
        with self._lock:
            self._scripts[path].extend(answers)

    def received(self, path: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self._received if path is None or r.path == path]

    def wait_for(self, path: str, count: int, timeout: float = 30) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.received(path)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{path}: {len(self.received(path))} of {count} requests in {timeout} s"
                )
            time.sleep(0.05)
        return self.received(path)

    def __enter__(self) -> SlackReceiver:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, path: str, body: bytes) -> tuple[int, Answer]:
        with self._lock:
            script = self._scripts[path]
            answer = script.popleft() if script else OK
            parsed = json.loads(body or b"{}")
            self._received.append(Received(path, parsed, time.time(), answer.status))
            return len(self._received) - 1, answer

    def _answered(self, index: int) -> None:
        with self._lock:
            self._received[index] = dataclasses.replace(self._received[index], answered=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                index, answer = receiver._answer(self.path, self.rfile.read(length))
                if answer.delay_s and _hung_up(self.connection, answer.delay_s):
                    return  # the sender is gone: nobody to answer
                payload = answer.body.encode()
                self.send_response(answer.status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()
                receiver._answered(index)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet test output

        return Handler


def _hung_up(conn: socket.socket, hold_s: float) -> bool:
    """Wait up to `hold_s`; True as soon as the peer closes its end of the connection."""
    deadline = time.monotonic() + hold_s
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([conn], [], [], min(left, 0.05))
        if readable:
            try:
                if not conn.recv(1, socket.MSG_PEEK):
                    return True
            except OSError:
                return True
            time.sleep(0.05)  # bytes from a sender that is still there: keep holding
    return False
