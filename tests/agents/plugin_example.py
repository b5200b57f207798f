"""A collector plugin as a site would write one (used by the plugin test)."""

from __future__ import annotations

from agents.collectors.base import Reading
from agents.runconfig import AgentConfig


class InfinibandPortCollector:
    name = "ib-ports"
    interval_s = 1.0

    def __init__(self, config: AgentConfig) -> None:
        self.config = config

    def setup(self) -> None:
        pass

    def collect(self, now: float) -> Reading:
        reading = Reading()
        reading.add("node", {"ts": now, "net_rx_bytes_s": 1234.0})
        return reading

    def close(self) -> None:
        pass


def collector(config: AgentConfig) -> InfinibandPortCollector:
    return InfinibandPortCollector(config)
