"""Host tuning audit: what decides whether the GPUs are fed well, sent as `node_info.tuning`.

Read on start and once a minute; sent only when something changed. Findings are advice in
words, not alarms: a lab box and a production node want different things.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from agents.collectors.base import Reading

_BRACKETED = re.compile(r"\[([^\]]+)\]")


class TuningCollector:
    name = "tuning"

    def __init__(
        self, interval_s: float = 60.0, proc: Path = Path("/proc"), sys: Path = Path("/sys")
    ) -> None:
        self.interval_s = interval_s
        self.proc = proc
        self.sys = sys
        self._last: dict[str, Any] | None = None

    def setup(self) -> None:
        pass

    def close(self) -> None:
        pass

    def collect(self, now: float) -> Reading:
        tuning = self.audit()
        reading = Reading()
        if tuning != self._last:
            self._last = tuning
            reading.node_info = {"tuning": tuning}
        return reading

    def audit(self) -> dict[str, Any]:
        tuning: dict[str, Any] = {}
        thp = self.sys / "kernel" / "mm" / "transparent_hugepage"
        _set(tuning, "thp_enabled", _bracketed(thp / "enabled"))
        _set(tuning, "thp_defrag", _bracketed(thp / "defrag"))
        meminfo = _meminfo(self.proc / "meminfo")
        if "HugePages_Total" in meminfo:
            tuning["hugepages_total"] = meminfo["HugePages_Total"]
            tuning["hugepage_size_kb"] = meminfo.get("Hugepagesize", 0)
        cpu = self.sys / "devices" / "system" / "cpu"
        _set(tuning, "isolated_cpus", _read(cpu / "isolated"))
        _set(tuning, "nohz_full", _read(cpu / "nohz_full"))
        governors = Counter(
            g for g in (_read(p) for p in cpu.glob("cpu[0-9]*/cpufreq/scaling_governor")) if g
        )
        if governors:
            tuning["cpu_governors"] = dict(sorted(governors.items()))
        _set(tuning, "kernel_cmdline", _read(self.proc / "cmdline"))
        tuning["findings"] = findings(tuning)
        return tuning


def findings(tuning: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    governors: dict[str, int] = tuning.get("cpu_governors", {})
    slow = {g: n for g, n in governors.items() if g not in ("performance",)}
    if slow:
        listed = ", ".join(f"{g} on {n} CPUs" for g, n in slow.items())
        notes.append(
            f"CPU frequency governor is {listed}: the threads that feed the GPUs may run slow "
            "(GPU servers usually run `performance`)"
        )
    if not governors:
        notes.append("no cpufreq governor exposed (a VM, or firmware-managed frequency)")
    if tuning.get("thp_enabled") == "always":
        notes.append("transparent huge pages `always`: may add latency spikes from compaction")
    isolated = tuning.get("isolated_cpus") or ""
    if isolated and not tuning.get("nohz_full"):
        notes.append(f"CPUs {isolated} are isolated but not nohz_full: they still take timer ticks")
    cmdline = tuning.get("kernel_cmdline", "")
    if (
        cmdline
        and "iommu=pt" not in cmdline
        and ("intel_iommu=on" in cmdline or "amd_iommu=on" in cmdline)
    ):
        notes.append(
            "IOMMU on without iommu=pt: GPU DMA goes through translation (slower P2P/RDMA)"
        )
    return notes


def _set(target: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        target[key] = value


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _bracketed(path: Path) -> str | None:
    text = _read(path)
    if text is None:
        return None
    match = _BRACKETED.search(text)
    return match.group(1) if match else text


def _meminfo(path: Path) -> dict[str, int]:
    values: dict[str, int] = {}
    text = _read(path) or ""
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key.startswith("HugePage") or key == "Hugepagesize":
            try:
                values[key] = int(rest.split()[0])
            except (IndexError, ValueError):
                continue
    return values
