"""The Prometheus side of bench/peer.py: Debian's Prometheus scraping one dcgm-exporter-shaped
target per node of 8 GPUs every second (bench/peer_exporter.py serves them all), its blocks
forced to 5 minutes so that it compacts its head inside the run.

What it spent: Prometheus's CPU (/proc, the process and any children) from its start to the
end of the run, over the GPU samples the exporter served it; what it keeps: every file under
its data directory (blocks, WAL, chunks_head) at the end, over the same GPU samples.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench import scale_procs as procs
from bench.peer_exporter import node_name
from tests.support.processes import stop_process
from tests.support.prometheus_pull import PROMETHEUS, require_prometheus
from tests.support.server import free_port

ROOT = Path(__file__).resolve().parent.parent
BLOCK_FLAGS = ("--storage.tsdb.min-block-duration=5m", "--storage.tsdb.max-block-duration=5m")


@dataclass
class PromRun:
    seconds: float  # Prometheus's lifetime, the span its CPU is counted over
    cpu_s: float
    exporter_cpu_s: float
    gpu_samples: int  # GPU readings scraped (8 per node page served)
    disk: dict[str, int]  # bytes per part of the data directory
    block_hours: float  # the time span the blocks cover
    compactions: float
    head_series: float
    appended: float  # samples Prometheus appended (GPU fields and its own per-scrape series)
    notes: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(self.disk.values())


def config(port: int, nodes: int) -> str:
    """A scrape config with one target per node: same address, the node's own path and
    `instance` label (JSON is YAML)."""
    groups = [
        {
            "targets": [f"127.0.0.1:{port}"],
            "labels": {"__metrics_path__": f"/node/{i}", "instance": node_name(i)},
        }
        for i in range(nodes)
    ]
    conf = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "dcgm-exporter", "static_configs": groups}],
    }
    return json.dumps(conf)


def data_dir_bytes(tsdb: Path) -> tuple[dict[str, int], float]:
    """Bytes (file sizes) under the data directory by part, and the hours its blocks span
    (their meta.json)."""
    parts: dict[str, int] = {"blocks": 0, "wal": 0, "chunks_head": 0, "other": 0}
    block_ms = 0
    for entry in tsdb.iterdir():
        size = (
            sum(p.stat().st_size for p in entry.rglob("*") if p.is_file())
            if entry.is_dir()
            else entry.stat().st_size
        )
        if (entry / "meta.json").exists():
            parts["blocks"] += size
            meta = json.loads((entry / "meta.json").read_text())
            block_ms += int(meta["maxTime"]) - int(meta["minTime"])
        elif entry.name in parts:
            parts[entry.name] += size
        else:
            parts["other"] += size
    return parts, block_ms / 3.6e6


def own_metric(port: int, name: str) -> float:
    """One of Prometheus's own metrics (its /metrics), summed over label sets."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " ")
    )


def wait_ready(proc: subprocess.Popen[str]) -> None:
    line = proc.stdout.readline() if proc.stdout else ""
    if line.strip() != "ready":
        raise RuntimeError(f"exporter did not start: {line!r}")


def run_prometheus(
    tmp: Path, nodes: int, seconds: float, origin: int, log: Callable[[str], None]
) -> PromRun:
    require_prometheus()
    tmp.mkdir(parents=True, exist_ok=True)
    exporter_port, prom_port = free_port(), free_port()
    counts = tmp / "exporter.json"
    exporter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.peer_exporter",
            "--origin",
            str(origin),
            "--port",
            str(exporter_port),
            "--nodes",
            str(nodes),
            "--out",
            str(counts),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_ready(exporter)
        (tmp / "prometheus.yml").write_text(config(exporter_port, nodes))
        tsdb = tmp / "tsdb"
        with (tmp / "prometheus.log").open("wb") as out:
            prom = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tsdb}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                    "--storage.tsdb.retention.time=1d",
                    *BLOCK_FLAGS,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        started = time.time()
        try:
            end = started + seconds
            while time.time() < end:
                if prom.poll() is not None:
                    raise RuntimeError(
                        f"prometheus exited: {(tmp / 'prometheus.log').read_text()[-2000:]}"
                    )
                time.sleep(min(30.0, max(0.0, end - time.time())))
                log(f"  prometheus: {time.time() - started:.0f} s, load {os.getloadavg()[0]:.1f}")
            cpu = procs.cpu_spent({}, procs.cpu_of(procs.with_children([prom.pid])))
            exporter_cpu = procs.cpu_seconds(exporter.pid)
            compactions = own_metric(prom_port, "prometheus_tsdb_compactions_total")
            series = own_metric(prom_port, "prometheus_tsdb_head_series")
            appended = own_metric(prom_port, "prometheus_tsdb_head_samples_appended_total")
            disk, block_hours = data_dir_bytes(tsdb)
            lifetime = time.time() - started
        finally:
            stop_process(prom, 60)
    finally:
        exporter.send_signal(signal.SIGTERM)
        exporter.wait(30)
    served = json.loads(counts.read_text())
    return PromRun(
        lifetime,
        cpu,
        exporter_cpu,
        int(served["gpu_samples"]),
        disk,
        block_hours,
        compactions,
        series,
        appended,
    )
