"""Receivers for the remote-write tests and bench: a real Prometheus (Debian's
/usr/bin/prometheus) with its remote-write receiver on, stoppable and restartable on the same
port and data directory (an outage in the middle); a loopback receiver that answers whatever
status a test sets (the answers a healthy Prometheus does not give on demand: 5xx, 429); and
a small inventory the shipped labels come from."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cramjam
import pytest
from django.db import connections

from fleet.models import GPU, Hall, Node, Rack, Site
from fleet.storage.db import open_db
from fleet.storage.latest import LatestDelta
from fleet.storage.samples import SampleWrite, write_samples
from tests.support.processes import stop_process
from tests.support.prometheus_pull import PROMETHEUS, require_prometheus
from tests.support.server import free_port


class Receiver:
    """Prometheus started with `--web.enable-remote-write-receiver`, scraping nothing."""

    def __init__(self, workdir: Path) -> None:
        require_prometheus()
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.write_url = f"{self.url}/api/v1/write"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "prometheus.yml"
        self.config.write_text("global:\n  scrape_interval: 1m\n")
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        log = (self.workdir / "prometheus.log").open("ab")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-remote-write-receiver",
                "--storage.tsdb.retention.time=2d",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"prometheus not ready in 60 s: {self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 10)
            self.proc = None

    def log_tail(self) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def query(self, promql: str, at: float) -> list[dict[str, Any]]:
        """An instant query at `at`: the result's series."""
        args = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{args}", timeout=30) as resp:
            result: list[dict[str, Any]] = json.load(resp)["data"]["result"]
            return result

    def samples(self, metric: str, at: float, window_s: int) -> dict[tuple[str, ...], list[Any]]:
        """Every stored sample of `metric` in the `window_s` before `at`, by its label values
        (a range-vector selector: raw samples, not a query's evaluation)."""
        found: dict[tuple[str, ...], list[Any]] = {}
        for series in self.query(f"{metric}[{window_s}s]", at):
            labels = tuple(sorted(f"{k}={v}" for k, v in series["metric"].items()))
            found[labels] = [(float(t), float(v)) for t, v in series["values"]]
        return found


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Receiver]:
    """A test's own Prometheus receiver, stopped after it (use as `prometheus = …prometheus`)."""
    receiver = Receiver(tmp_path / "prometheus")
    yield receiver
    receiver.stop()


@dataclass
class Exchange:
    status: int
    body: bytes  # the decompressed WriteRequest
    headers: dict[str, str] = field(default_factory=dict)  # the request's


class StatusReceiver:
    """A loopback receiver that answers every POST with `status` and keeps what it got; a
    GET (a PromQL read at `base`) is answered with no series, its headers kept in `queries`."""

    def __init__(self, status: int = 204) -> None:
        self.status = status
        self.received: list[Exchange] = []
        self.queries: list[dict[str, str]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = bytes(cramjam.snappy.decompress_raw(raw))
                owner.received.append(Exchange(owner.status, body, dict(self.headers.items())))
                self.send_response(owner.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                owner.queries.append(dict(self.headers.items()))
                body = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = f"{self.base}/api/v1/write"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass(frozen=True)
class Place:
    site: Site
    rack: Rack
    node: Node


def small_site(using: str, gpus: int = 2) -> Place:
    """Site "lab", rack A01, node gpu-a01-01 with `gpus` GPUs (UUIDs GPU-0…)."""
    site = Site.objects.using(using).create(slug="lab", name="Lab")
    hall = Hall.objects.using(using).create(site=site, name="H1")
    rack = Rack.objects.using(using).create(hall=hall, name="A01", power_budget_kw=60)
    node = Node.objects.using(using).create(name="gpu-a01-01", rack=rack)
    for index in range(gpus):
        GPU.objects.using(using).create(node=node, index=index, uuid=f"GPU-{index}")
    return Place(site, rack, node)


def store(using: str, kind: str, items: list[tuple[tuple[int, ...], dict[str, Any]]]) -> None:
    """Samples (entity key, {"ts": …, field: value}) of `kind` stored through the one write
    path (`write_samples`), in one commit, from a storage connection of their own, as the
    ingest writer stores an agent's batches."""
    write = SampleWrite()
    write.add_samples(kind, items)
    storage = open_db(dict(connections.settings[using]))
    try:
        write_samples(storage, write, LatestDelta())
    finally:
        storage.close()


def gpu_value(field: str, node_id: int, gpu: int, t: float) -> float:
    """The value a test GPU reports for `field` at `t`: distinct per GPU and second."""
    base = {"temp_gpu_c": 40.0, "power_w": 300.0}[field]
    return base + gpu * 10 + (t % 997) / 8


def store_gpu_seconds(
    using: str, node_id: int, gpus: int, start: int, stop: int, every: int
) -> int:
    """Temperature and power of `gpus` GPUs of one node from `start` to `stop` (exclusive),
    every `every` s, plus the node's CPU load; the raw GPU rows stored."""
    gpu_items: list[tuple[tuple[int, ...], dict[str, Any]]] = []
    node_items: list[tuple[tuple[int, ...], dict[str, Any]]] = []
    for t in range(start, stop, every):
        for g in range(gpus):
            gpu_items.append(
                (
                    (node_id, g),
                    {"ts": float(t)}
                    | {f: gpu_value(f, node_id, g, t) for f in ("temp_gpu_c", "power_w")},
                )
            )
        node_items.append(((node_id,), {"ts": float(t), "cpu_pct": float(t % 100)}))
    store(using, "gpu", gpu_items)
    store(using, "node", node_items)
    return len(gpu_items)
