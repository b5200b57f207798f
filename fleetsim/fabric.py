"""Each virtual node's InfiniBand ports, as a fake sysfs tree the agent's real fabric
collector reads (agents/collectors/fabric.py through agents/fabric/sysfs.py, `sysfs_root`
pointed at the node's tree, as the recorded-tree tests do).

Per node with GPUs, under `<fabric dir>/<node>/class/infiniband/`: one NDR HCA per GPU
(`mlx5_0`…, port 1, `400 Gb/sec (4X NDR)`, InfiniBand) — an HGX H100/H200 server's eight
compute HCAs, a GB200 NVL72 compute tray's four — in the kernel's shapes (`4: ACTIVE`,
`5: LinkUp`, decimal counters; drivers/infiniband/core/sysfs.c). A healthy port's counters
advance as a sound link's do: a stray symbol error about once an hour, little else.

Faults (fleetsim/faults.py), on `NODE` (its `mlx5_0`) or `NODE/HCA` (`gpu-a01-03/5`: mlx5_5):

- `ib-port-flap`: the link goes down and retrains every `every` seconds (default 60): each
  flap adds one to `link_downed` and `link_error_recovery`, and the next read finds the port
  DOWN/Polling, the one after ACTIVE again;
- `ib-symbol-errors`: `symbol_error` rises at `rate` an hour (default 1800), with a tenth as
  many `port_rcv_errors` (bad packets from the same lanes);
- `ib-port-down`: the port goes DOWN/Polling (one `link_downed`) and stays so while the
  fault lasts.

Only files that changed are written at a read, and the reads are spread over the 10 s cycle
(each node on its own tick), so the tick's cost does not grow with the port count.
"""

from __future__ import annotations

import math
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from agents.collectors.base import Reading
from agents.collectors.fabric import FABRIC_S, FabricCollector
from agents.protocol.fabric import COUNTER_BITS
from fleetsim.faults import Fault, FaultPlan
from fleetsim.fleet import SiteModel, VirtualNode

FLAP, SYMBOLS, DOWN = "ib-port-flap", "ib-symbol-errors", "ib-port-down"
RATE = "400 Gb/sec (4X NDR)"
ACTIVE_WORDS = ("4: ACTIVE", "5: LinkUp")
DOWN_WORDS = ("1: DOWN", "2: Polling")
# A sound NDR link: about one symbol error an hour per port (far under the 120 an hour
# the fabric rules judge, docs/rules.md), and a link error recovery a day.
HEALTHY_PER_HOUR = {"symbol_error": 1.0, "link_error_recovery": 1 / 24}
FLAP_EVERY_S = 60.0
SYMBOL_RATE_PER_H = 1800.0
RCV_PER_SYMBOL = 0.1


@dataclass(slots=True)
class SimPort:
    """One port's state and counters, and what was last written of them."""

    path: Path
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTER_BITS, 0))
    words: tuple[str, str] = ACTIVE_WORDS
    written: dict[str, str] = field(default_factory=dict)
    carry: dict[str, float] = field(default_factory=dict)  # fractions of an error not yet due
    last_flap: float | None = None

    def add(self, name: str, rise: int) -> None:
        # IBA error counters stop at their maximum instead of wrapping.
        top = 2 ** COUNTER_BITS[name] - 1
        self.counters[name] = min(top, self.counters[name] + rise)

    def flush(self) -> None:
        """Write the files whose contents changed since the last flush."""
        files = {"state": self.words[0], "phys_state": self.words[1]}
        files.update({f"counters/{k}": str(v) for k, v in self.counters.items()})
        for name, text in files.items():
            if self.written.get(name) != text:
                _write(self.path / name, text)
                self.written[name] = text


class NodeFabric:
    """One virtual node's HCAs, their sysfs tree, and the real collector reading it."""

    def __init__(self, node: VirtualNode, root: Path, seed: int) -> None:
        self.name = node.name
        self.root = root
        self.rng = random.Random(f"{seed}:{node.name}:fabric")
        shutil.rmtree(root, ignore_errors=True)  # a previous run's ports are gone
        self.ports: list[SimPort] = []
        for hca in range(len(node.gpus)):
            device = root / "class" / "infiniband" / f"mlx5_{hca}"
            port = device / "ports" / "1"
            (port / "counters").mkdir(parents=True)
            _write(device / "node_type", "1: CA")
            _write(port / "rate", RATE)
            _write(port / "link_layer", "InfiniBand")
            sim = SimPort(port)
            sim.flush()
            self.ports.append(sim)
        self.collector = FabricCollector(root)
        self.collector.setup()
        self.last: float | None = None

    def read(self, ts: float, elapsed: float, faults: FaultPlan) -> Reading:
        """Advance the counters to `elapsed` (seconds since the simulator started) and read
        the tree as the agent does, stamped `ts`."""
        step = 0.0 if self.last is None else max(0.0, elapsed - self.last)
        self.last = elapsed
        for hca, port in enumerate(self.ports):
            self._advance(port, hca, step, elapsed, faults)
            port.flush()
        return self.collector.read(ts)

    def _advance(
        self, port: SimPort, hca: int, step: float, elapsed: float, faults: FaultPlan
    ) -> None:
        for name, per_hour in HEALTHY_PER_HOUR.items():
            if self.rng.random() < per_hour * step / 3600:
                port.add(name, 1)
        symbols = self._fault(faults, SYMBOLS, hca, elapsed)
        if symbols is not None:
            rate = symbols.number("rate", SYMBOL_RATE_PER_H)
            self._accrue(port, "symbol_error", rate * step / 3600)
            self._accrue(port, "port_rcv_errors", RCV_PER_SYMBOL * rate * step / 3600)
        down = self._fault(faults, DOWN, hca, elapsed)
        flap = self._fault(faults, FLAP, hca, elapsed)
        if down is not None:
            if port.words != DOWN_WORDS:
                port.add("link_downed", 1)
            port.words = DOWN_WORDS
        elif flap is not None and _flap_due(port, flap, elapsed):
            port.add("link_downed", 1)
            port.add("link_error_recovery", 1)
            port.last_flap = elapsed
            port.words = DOWN_WORDS  # this read finds it down
        else:
            port.words = ACTIVE_WORDS  # retrained since, or never down

    def _fault(self, faults: FaultPlan, kind: str, hca: int, elapsed: float) -> Fault | None:
        found = faults.active(kind, f"{self.name}/{hca}", elapsed)
        if found is None and hca == 0:
            found = faults.active(kind, self.name, elapsed)
        return found

    def _accrue(self, port: SimPort, name: str, expected: float) -> None:
        due = port.carry.get(name, 0.0) + expected
        whole = math.floor(due)
        port.carry[name] = due - whole
        if whole:
            port.add(name, whole)


def _flap_due(port: SimPort, fault: Fault, elapsed: float) -> bool:
    every = fault.number("every", FLAP_EVERY_S)
    return port.last_flap is None or elapsed - port.last_flap >= every


def _write(path: Path, text: str) -> None:
    # os.open/os.write: no buffered file object per file (many small writes per read).
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, (text + "\n").encode("ascii"))
    finally:
        os.close(fd)


class SimFabric:
    """Every virtual node's ports: read every FABRIC_S, each node on its own tick of the
    cycle so that the reads do not all land together."""

    def __init__(
        self, model: SiteModel, root: Path, interval_s: float = 1.0, seed: int = 0
    ) -> None:
        self.faults = model.faults
        self.every_ticks = max(1, round(FABRIC_S / interval_s))
        self.nodes = {
            name: NodeFabric(node, root / name, seed)
            for name, node in model.nodes.items()
            if node.gpus
        }
        self._offsets = {name: i % self.every_ticks for i, name in enumerate(self.nodes)}

    def due(self, name: str, tick: int) -> bool:
        return tick % self.every_ticks == self._offsets.get(name, -1)

    def read(self, name: str, ts: float, elapsed: float) -> Reading:
        return self.nodes[name].read(ts, elapsed, self.faults)
