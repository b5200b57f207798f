"""A fake dcgm-exporter (exposition text over HTTP, from a thread) and a real Prometheus
(Debian's /usr/bin/prometheus) scraping it every second, for the pull tests and the bench."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.support.server import free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def require_prometheus() -> None:
    """Skip (with the reason) where Debian's prometheus is not installed; REQUIRE_PROMETHEUS=1
    (set by .ci/run) makes that a failure instead."""
    if not Path(PROMETHEUS).exists():
        from tests.support import needs  # pytest: the bench imports this module without it

        needs.missing(
            needs.PROMETHEUS, "Debian's prometheus is not installed (apt-get install prometheus)"
        )


CSV = Path(__file__).resolve().parent.parent / "data" / "dcgm-exporter" / "default-counters.csv"


def default_counters() -> list[tuple[str, str]]:
    """(field, type) of every line of dcgm-exporter's default list, commented ones too."""
    out = []
    for line in CSV.read_text().splitlines():
        text = line.lstrip("# ").strip()
        parts = [p.strip() for p in text.split(",")]
        if len(parts) >= 3 and parts[0].startswith("DCGM_FI_"):
            out.append((parts[0], parts[1]))
    return out


def labels_text(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def exposition(series: Iterable[tuple[str, dict[str, str], float | int]]) -> bytes:
    """dcgm-exporter's text: HELP/TYPE once per field, then its series."""
    kinds = dict(default_counters())
    by_name: dict[str, list[str]] = {}
    for name, labels, value in series:
        by_name.setdefault(name, []).append(f"{name}{{{labels_text(labels)}}} {value}")
    lines = []
    for name, rows in by_name.items():
        lines += [f"# HELP {name} {name}.", f"# TYPE {name} {kinds.get(name, 'gauge')}", *rows]
    return ("\n".join(lines) + "\n").encode()


class Exporter:
    """Serves whatever `body` holds at /metrics."""

    def __init__(self) -> None:
        self.body = b""
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = owner.body
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Prometheus:
    """A real Prometheus on a free loopback port scraping `target` every `interval`."""

    def __init__(
        self,
        workdir: Path,
        target: str,
        interval: str = "1s",
        job: str = "dcgm-exporter",
        bearer: str | None = None,
    ) -> None:
        require_prometheus()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {interval}\n"
            f"  scrape_timeout: {interval}\n"
            "scrape_configs:\n"
            f"  - job_name: {job}\n"
            + (f"    authorization:\n      credentials: {bearer}\n" if bearer else "")
            + "    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )
        self.log = (workdir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=30) as resp:
            result: list[dict[str, Any]] = json.load(resp)["data"]["result"]
            return result

    def wait_for(self, promql: str, count: int, timeout: float = 60) -> None:
        """Poll until `count(promql)` reaches `count` (the exporter has been scraped)."""
        deadline = time.monotonic() + timeout
        seen = -1
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}")
            try:
                result = self.query(f"count({promql})")
                seen = int(float(result[0]["value"][1])) if result else 0
                if seen >= count:
                    return
            except OSError:
                pass  # not listening yet
            time.sleep(0.2)
        raise TimeoutError(f"{promql}: {seen} of {count} series after {timeout} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def closed_port_url() -> str:
    """A loopback URL nothing listens on (a Prometheus that is down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
