"""A recorded sysfs tree of RDMA ports (tests/data/sysfs/infiniband/) copied where a test may
change it — a counter rises, a port goes down — read by the agent's real fabric collector and
sent through the ingest pipeline as the node's `fabric` part."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from agents.collectors.fabric import FabricCollector
from fleet.ingest.pipeline import IngestPipeline

RECORDED = Path(__file__).resolve().parents[1] / "data" / "sysfs" / "infiniband"


class PortTree:
    """A copy of one recorded shape under `root`, and a collector reading it."""

    def __init__(self, shape: str, root: Path) -> None:
        shutil.copytree(RECORDED / shape, root)
        self.root = root
        self.collector = FabricCollector(root)
        self.collector.setup()

    def port_dir(self, device: str, port: int = 1) -> Path:
        return self.root / "class" / "infiniband" / device / "ports" / str(port)

    def counter(self, device: str, name: str, port: int = 1) -> int:
        return int((self.port_dir(device, port) / "counters" / name).read_text())

    def add(self, device: str, name: str, rise: int, port: int = 1) -> None:
        """The counter rises by `rise`, as the HCA's would."""
        path = self.port_dir(device, port) / "counters" / name
        path.write_text(f"{int(path.read_text()) + rise}\n")

    def state(self, device: str, state: str, phys_state: str, port: int = 1) -> None:
        """The port's state as the kernel prints it: `state("mlx5_3", "1: DOWN", "2: Polling")`."""
        (self.port_dir(device, port) / "state").write_text(state + "\n")
        (self.port_dir(device, port) / "phys_state").write_text(phys_state + "\n")

    def read(self, ts: float) -> list[dict[str, Any]]:
        return self.collector.read(ts).fabric


def send_fabric(
    pipeline: IngestPipeline, source: str, seq: int, entries: list[dict[str, Any]]
) -> None:
    """One batch carrying `entries` as `fabric`; fails the test unless it was stored."""
    batch = {"protocol": 1, "source": source, "seq": seq, "fabric": entries}
    [result] = pipeline.process([(1, json.dumps(batch).encode())], time.time())
    assert result.code == 0, result
