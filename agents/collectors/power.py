"""Node input power: IPMI DCMI through `ipmitool` when installed, Redfish when a BMC URL is set.

Both are slow (a subprocess, an HTTP round trip to the BMC), so they are slow reads, every
`every_ticks` ticks, never on the tick itself. The Redfish client is the facility
collectors' (`agents.facility.redfish`); when that package is absent, Redfish is skipped.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from agents.collectors.base import NotPresent, Reading, SlowRead
from agents.log import get_logger

log = get_logger("agents.collectors.power")

_DCMI_READING = re.compile(r"Instantaneous power reading:\s+(\d+(?:\.\d+)?)\s+Watts", re.I)
_DCMI_STATE = re.compile(r"Power reading state is:\s+(\w+)", re.I)


def parse_dcmi(output: str) -> float | None:
    """The watts from `ipmitool dcmi power reading`, or None when the BMC says it is inactive."""
    state = _DCMI_STATE.search(output)
    if state is not None and state.group(1).lower() != "activated":
        return None
    match = _DCMI_READING.search(output)
    return float(match.group(1)) if match else None


class IpmiPowerCollector:
    name = "ipmi"

    def __init__(
        self, ipmitool: str = "ipmitool", every_ticks: int = 5, timeout_s: float = 5.0
    ) -> None:
        self.ipmitool = ipmitool
        self.interval_s = 1.0
        self.every_ticks = every_ticks
        self.timeout_s = timeout_s
        self._path: str | None = None

    def setup(self) -> None:
        self._path = shutil.which(self.ipmitool)
        if self._path is None:
            raise NotPresent(f"{self.ipmitool} not installed: no IPMI node power")

    def collect(self, now: float) -> Reading:
        return Reading()  # everything happens on the slow lane

    def slow_reads(self) -> list[SlowRead]:
        return [SlowRead("ipmi:power", self.every_ticks, 0, self.read)]

    def read(self, now: float) -> Reading:
        assert self._path is not None
        done = subprocess.run(
            [self._path, "dcmi", "power", "reading"],
            capture_output=True,
            text=True,
            timeout=self.timeout_s,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"ipmitool failed ({done.returncode}): {done.stderr.strip()[:200]}")
        reading = Reading()
        watts = parse_dcmi(done.stdout)
        if watts is not None:
            reading.add("node", {"ts": now, "power_w": watts})
        return reading

    def close(self) -> None:
        pass


class RedfishPowerCollector:
    name = "redfish"

    def __init__(
        self, bmc_url: str, user: str = "", password_file: str = "", every_ticks: int = 5
    ) -> None:
        self.bmc_url = bmc_url
        self.user = user
        self.password_file = password_file
        self.interval_s = 1.0
        self.every_ticks = every_ticks
        self._client: Any = None
        self._read_node_power: Any = None

    def setup(self) -> None:
        try:
            from agents.facility.redfish import read_node_power
            from agents.facility.redfish_client import RedfishClient
        except ImportError:
            raise NotPresent("the Redfish client (agents.facility) is not installed") from None
        password = Path(self.password_file).read_text().strip() if self.password_file else None
        self._client = RedfishClient(self.bmc_url, username=self.user or None, password=password)
        self._read_node_power = read_node_power

    def collect(self, now: float) -> Reading:
        return Reading()

    def slow_reads(self) -> list[SlowRead]:
        return [SlowRead("redfish:power", self.every_ticks, 0, self.read)]

    def read(self, now: float) -> Reading:
        values = self._read_node_power(self._client)
        sample: dict[str, Any] = {"ts": now}
        for name in ("power_w", "temp_inlet_c", "temp_outlet_c"):
            if values.get(name) is not None:
                sample[name] = values[name]
        reading = Reading()
        if len(sample) > 1:
            reading.add("node", sample)
        return reading

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
