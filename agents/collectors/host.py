"""Host metrics from /proc and /sys: CPU, load, memory, disk and network rates, hwmon temperatures.

Rates (CPU %, bytes/s) need two reads, so the first tick after start sends only the gauges.
`proc` and `sys` roots are parameters so tests can point them at a directory tree of real
files shaped like the kernel's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from agents.collectors.base import Reading

SECTOR_BYTES = 512
# Network interfaces that carry no traffic of the node's own (containers, bridges, tunnels).
_VIRTUAL_NET_PREFIXES = ("lo", "veth", "docker", "br-", "virbr", "cni", "flannel", "cali", "tun")
# hwmon chips whose readings are CPU package temperatures.
_CPU_CHIPS = ("coretemp", "k10temp", "zenpower", "cpu_thermal")
_INLET_WORDS = ("inlet", "intake", "ambient", "front")
_OUTLET_WORDS = ("outlet", "exhaust", "rear")


class HostCollector:
    name = "host"

    def __init__(
        self, interval_s: float = 1.0, proc: Path = Path("/proc"), sys: Path = Path("/sys")
    ) -> None:
        self.interval_s = interval_s
        self.proc = proc
        self.sys = sys
        self._cpu: tuple[int, int] | None = None
        self._counters: dict[str, float] = {}
        self._at: float | None = None

    def setup(self) -> None:
        (self.proc / "stat").read_bytes()  # no /proc: nothing to read here

    def close(self) -> None:
        pass

    def collect(self, now: float) -> Reading:
        sample: dict[str, object] = {"ts": now}
        sample.update(self._cpu_pct())
        sample.update(self._load())
        sample.update(self._memory())
        sample.update(self._rates())
        sample.update(self._temperatures())
        reading = Reading()
        reading.add("node", sample)
        return reading

    # -- /proc ---------------------------------------------------------------------------------

    def _cpu_pct(self) -> dict[str, float]:
        fields = (self.proc / "stat").read_text().split("\n", 1)[0].split()[1:]
        values = [int(v) for v in fields]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        total = sum(values[:8])  # steal included, guest already counted in user
        previous, self._cpu = self._cpu, (total, idle)
        if previous is None or total <= previous[0]:
            return {}
        busy = 1.0 - (idle - previous[1]) / (total - previous[0])
        return {"cpu_pct": round(min(100.0, max(0.0, 100.0 * busy)), 2)}

    def _load(self) -> dict[str, float]:
        return {"load1": float((self.proc / "loadavg").read_text().split()[0])}

    def _memory(self) -> dict[str, float]:
        info: dict[str, int] = {}
        for line in (self.proc / "meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                info[key] = int(rest.split()[0])  # kB
        if "MemTotal" not in info or "MemAvailable" not in info:
            return {}
        return {
            "mem_total_mib": round(info["MemTotal"] / 1024.0, 1),
            "mem_used_mib": round((info["MemTotal"] - info["MemAvailable"]) / 1024.0, 1),
        }

    def _rates(self) -> dict[str, float]:
        counters = {**self._disk_counters(), **self._net_counters()}
        now = time.monotonic()
        previous, previous_at = self._counters, self._at
        self._counters, self._at = counters, now
        if previous_at is None or now <= previous_at:
            return {}
        elapsed = now - previous_at
        rates: dict[str, float] = {}
        for name, value in counters.items():
            if name in previous and value >= previous[name]:  # a wrapped or reset counter: skip
                rates[name] = round((value - previous[name]) / elapsed, 1)
        return rates

    def _disk_counters(self) -> dict[str, float]:
        read = written = 0
        try:
            lines = (self.proc / "diskstats").read_text().splitlines()
        except FileNotFoundError:
            return {}
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or not self._is_physical_disk(parts[2]):
                continue
            read += int(parts[5]) * SECTOR_BYTES
            written += int(parts[9]) * SECTOR_BYTES
        return {"disk_read_bytes_s": read, "disk_write_bytes_s": written}

    def _is_physical_disk(self, name: str) -> bool:
        # Whole devices only (partitions would count twice); /sys/block lists exactly those,
        # and a `device` link tells hardware from loop, ram, dm and md devices.
        return (self.sys / "block" / name / "device").exists()

    def _net_counters(self) -> dict[str, float]:
        rx = tx = 0
        try:
            lines = (self.proc / "net" / "dev").read_text().splitlines()[2:]
        except FileNotFoundError:
            return {}
        for line in lines:
            name, _, rest = line.partition(":")
            name = name.strip()
            if name.startswith(_VIRTUAL_NET_PREFIXES):
                continue
            fields = rest.split()
            rx += int(fields[0])
            tx += int(fields[8])
        return {"net_rx_bytes_s": rx, "net_tx_bytes_s": tx}

    # -- /sys/class/hwmon ------------------------------------------------------------------------

    def _temperatures(self) -> dict[str, float]:
        cpu: list[float] = []
        inlet: list[float] = []
        outlet: list[float] = []
        root = self.sys / "class" / "hwmon"
        for chip in sorted(root.glob("hwmon*")):
            chip_name = _read(chip / "name")
            for sensor in chip.glob("temp*_input"):
                value = _millidegrees(sensor)
                if value is None:
                    continue
                label = (
                    _read(sensor.with_name(sensor.name.replace("_input", "_label"))) or ""
                ).lower()
                if chip_name in _CPU_CHIPS and (
                    not label or "package" in label or "tctl" in label or "tdie" in label
                ):
                    cpu.append(value)
                elif any(word in label for word in _INLET_WORDS):
                    inlet.append(value)
                elif any(word in label for word in _OUTLET_WORDS):
                    outlet.append(value)
        temps: dict[str, float] = {}
        if cpu:
            temps["temp_cpu_c"] = max(cpu)  # the hottest package is the one that throttles
        if inlet:
            temps["temp_inlet_c"] = min(inlet)
        if outlet:
            temps["temp_outlet_c"] = max(outlet)
        return temps


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _millidegrees(path: Path) -> float | None:
    text = _read(path)
    try:
        return None if text is None else round(int(text) / 1000.0, 1)
    except ValueError:
        return None


def cpu_count() -> int:
    return os.cpu_count() or 1
