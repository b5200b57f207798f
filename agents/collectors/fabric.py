"""InfiniBand and RoCE ports: the `fabric` part, read on the slow lane (every 10 s by default).

Each read lists the ports again (a driver reload adds or removes them) and sends each one's
state and error counters (agents/fabric/sysfs.py). The counters are sent as read: the server
turns a rise in `link_downed`, or a port leaving ACTIVE, into an event (fleet/storage/fabric.py),
so the agent keeps no memory of earlier reads and a restart loses nothing.

On a real HCA each counter file is a performance-management MAD to the adapter's firmware,
which is why this stays off the tick.
"""

from __future__ import annotations

from pathlib import Path

from agents.collectors.base import NotPresent, Reading, SlowRead
from agents.fabric.sysfs import class_dir, list_ports, read_port

FABRIC_S = 10.0  # the agent's default `fabric_s`


class FabricCollector:
    name = "fabric"

    def __init__(
        self, sysfs_root: Path = Path("/sys"), interval_s: float = 1.0, every_s: float = FABRIC_S
    ) -> None:
        self.root = sysfs_root
        self.interval_s = interval_s
        self.every_ticks = max(1, round(every_s / interval_s))

    def setup(self) -> None:
        if not class_dir(self.root).is_dir():
            raise NotPresent(f"no RDMA devices ({class_dir(self.root)} does not exist)")

    def close(self) -> None:
        pass

    def collect(self, now: float) -> Reading:
        return Reading()  # everything here is on the slow lane

    def slow_reads(self) -> list[SlowRead]:
        return [SlowRead("fabric", self.every_ticks, 0, self.read)]

    def read(self, now: float) -> Reading:
        return Reading(fabric=[read_port(port).as_wire(now) for port in list_ports(self.root)])
