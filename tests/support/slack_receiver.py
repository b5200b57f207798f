"""A local HTTP server that answers like a Slack incoming webhook, for delivery tests.

    with SlackReceiver() as slack:
        url = slack.url("/alerts")              # one "channel" per path
        slack.script("/alerts", RATE_LIMITED(2), OK)   # then "ok" for ever
        ...
        slack.received("/alerts")                # bodies and arrival times

Answers are taken in order per path; once a path's script is used up it answers 200 "ok".
"""

from __future__ import annotations

import json
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


OK = Answer()
SERVER_ERROR = Answer(500, "rollup_error")
CHANNEL_NOT_FOUND = Answer(404, "channel_not_found")
CHANNEL_IS_ARCHIVED = Answer(410, "channel_is_archived")
INVALID_BLOCKS = Answer(400, "invalid_blocks")


def rate_limited(retry_after: int) -> Answer:
    return Answer(429, "rate_limited", {"Retry-After": str(retry_after)})


@dataclass(frozen=True)
class Received:
    path: str
    body: dict[str, Any]
    at: float  # time.time() on arrival
    status: int  # what we answered


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

    def _answer(self, path: str, body: bytes) -> Answer:
        with self._lock:
            script = self._scripts[path]
            answer = script.popleft() if script else OK
            parsed = json.loads(body or b"{}")
            self._received.append(Received(path, parsed, time.time(), answer.status))
        return answer

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                answer = receiver._answer(self.path, self.rfile.read(length))
                payload = answer.body.encode()
                self.send_response(answer.status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet test output

        return Handler
