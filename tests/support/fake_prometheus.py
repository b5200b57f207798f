"""A local HTTP server answering the two instant queries a Prometheus pull asks
(fleet/ingest/prometheus/pull_query.py): each scrape target's newest scrape time, and each
field's value per GPU, as a Prometheus that scrapes one dcgm-exporter every
`scrape_s` seconds would. For scenarios that need a Prometheus source without Debian's
prometheus (tests/prometheus_pull/ drive the real one).

    with FakePrometheus({"gpu-a02-01": 8}, {"DCGM_FI_DEV_GPU_TEMP": 55}) as prom:
        prom.url          # the source's URL
        prom.pulls        # scrape-time queries answered: one per pull
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

INSTANCE = "10.0.3.17:9400"
_FIELD = re.compile(r"(DCGM_FI_[A-Z0-9_]+)\{")


class FakePrometheus:
    def __init__(
        self, gpus: dict[str, int], values: dict[str, float], scrape_s: float = 15.0
    ) -> None:
        self.gpus = gpus  # node name → GPUs on it (indices 0..n-1)
        self.values = values  # DCGM field → the value every GPU reports
        self.scrape_s = scrape_s
        self.pulls = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakePrometheus:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, query: str, at: float) -> list[dict[str, Any]]:
        """The result vector for one instant query at time `at`."""
        scraped = math.floor(at / self.scrape_s) * self.scrape_s  # the newest scrape
        if query.startswith("max by (instance) (timestamp("):
            with self._lock:
                self.pulls += 1
            return [{"metric": {"instance": INSTANCE}, "value": [at, str(scraped)]}]
        found = _FIELD.search(query)
        if found is None or found.group(1) not in self.values:
            return []
        value = str(self.values[found.group(1)])
        return [
            {
                "metric": {"gpu": str(index), "instance": INSTANCE, "Hostname": node},
                "value": [at, value],
            }
            for node, count in self.gpus.items()
            for index in range(count)
        ]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                params = urllib.parse.parse_qs(url.query)
                query = params.get("query", [""])[0]
                at = float(params.get("time", [time.time()])[0])
                body = json.dumps(
                    {
                        "status": "success",
                        "data": {"resultType": "vector", "result": fake.answer(query, at)},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
