from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agents.collectors.base import NotPresent
from agents.collectors.host import HostCollector
from agents.collectors.power import IpmiPowerCollector, RedfishPowerCollector, parse_dcmi
from agents.collectors.tuning import TuningCollector
from agents.outbox import build_batch
from agents.protocol.validate import validate_batch


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _host_tree(root: Path, cpu: tuple[int, int], disk_sectors: int, rx: int) -> None:
    busy, idle = cpu
    _write(root, "proc/stat", f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n")
    _write(root, "proc/loadavg", "2.50 1.00 0.50 3/400 1234\n")
    _write(
        root, "proc/meminfo", "MemTotal:  2048000 kB\nMemFree: 100 kB\nMemAvailable: 1024000 kB\n"
    )
    _write(
        root,
        "proc/diskstats",
        f"   8       0 sda 1 0 {disk_sectors} 0 1 0 {disk_sectors} 0 0 0 0\n"
        f"   8       1 sda1 1 0 {disk_sectors} 0 1 0 {disk_sectors} 0 0 0 0\n"
        "   7       0 loop0 1 0 999999 0 1 0 999999 0 0 0 0\n",
    )
    (root / "sys/block/sda/device").mkdir(parents=True, exist_ok=True)
    (root / "sys/block/loop0").mkdir(parents=True, exist_ok=True)
    header = "Inter-|   Receive |  Transmit\n face |bytes packets|bytes\n"
    _write(
        root,
        "proc/net/dev",
        header
        + "    lo: 999999 1 0 0 0 0 0 0 999999 1 0 0 0 0 0 0\n"
        + f"  eth0: {rx} 1 0 0 0 0 0 0 {rx // 2} 1 0 0 0 0 0 0\n"
        + " veth1: 555 1 0 0 0 0 0 0 555 1 0 0 0 0 0 0\n",
    )
    _write(root, "sys/class/hwmon/hwmon0/name", "coretemp\n")
    _write(root, "sys/class/hwmon/hwmon0/temp1_input", "61000\n")
    _write(root, "sys/class/hwmon/hwmon0/temp1_label", "Package id 0\n")
    _write(root, "sys/class/hwmon/hwmon0/temp2_input", "55000\n")
    _write(root, "sys/class/hwmon/hwmon0/temp2_label", "Package id 1\n")
    _write(root, "sys/class/hwmon/hwmon0/temp3_input", "70000\n")
    _write(root, "sys/class/hwmon/hwmon0/temp3_label", "Core 3\n")
    _write(root, "sys/class/hwmon/hwmon1/name", "nct6779\n")
    _write(root, "sys/class/hwmon/hwmon1/temp1_input", "23500\n")
    _write(root, "sys/class/hwmon/hwmon1/temp1_label", "Inlet Temp\n")
    _write(root, "sys/class/hwmon/hwmon1/temp2_input", "41000\n")
    _write(root, "sys/class/hwmon/hwmon1/temp2_label", "Exhaust Temp\n")


def test_host_collector_reads_gauges_then_rates_from_proc_and_sys(tmp_path: Path) -> None:
    _host_tree(tmp_path, (100, 900), disk_sectors=1000, rx=10_000)
    host = HostCollector(proc=tmp_path / "proc", sys=tmp_path / "sys")
    host.setup()
    first = host.collect(time.time()).samples["node"][0]
    assert first["load1"] == 2.5
    assert first["mem_total_mib"] == 2000.0 and first["mem_used_mib"] == 1000.0
    assert first["temp_cpu_c"] == 61.0  # hottest package, not a single core
    assert (first["temp_inlet_c"], first["temp_outlet_c"]) == (23.5, 41.0)
    assert "cpu_pct" not in first and "net_rx_bytes_s" not in first  # rates need two reads
    _host_tree(tmp_path, (400, 1600), disk_sectors=3000, rx=20_000)
    time.sleep(0.05)  # rates divide by the monotonic time between two reads: let some pass
    second = host.collect(time.time())
    sample = second.samples["node"][0]
    assert sample["cpu_pct"] == 30.0  # 300 busy of 1000 jiffies
    assert sample["disk_read_bytes_s"] > 0  # sda only: partitions and loop devices excluded
    assert sample["net_rx_bytes_s"] > 0
    ratio = sample["net_rx_bytes_s"] / sample["disk_read_bytes_s"]
    assert ratio == pytest.approx(10_000 / (2000 * 512), rel=0.01)
    validate_batch(build_batch("node:n1", 0, second, {}), time.time() + 1)


def test_host_collector_on_this_machine_gives_a_valid_sample() -> None:
    host = HostCollector()
    host.setup()
    host.collect(time.time())
    reading = host.collect(time.time())
    assert "mem_total_mib" in reading.samples["node"][0]
    validate_batch(build_batch("node:n1", 0, reading, {}), time.time() + 1)


def _tuning_tree(root: Path, governor: str) -> None:
    _write(root, "sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    _write(root, "sys/kernel/mm/transparent_hugepage/defrag", "[defer] madvise never\n")
    _write(root, "proc/meminfo", "HugePages_Total:      16\nHugepagesize:       2048 kB\n")
    _write(root, "sys/devices/system/cpu/isolated", "2-7\n")
    _write(root, "sys/devices/system/cpu/nohz_full", "\n")
    for cpu in range(4):
        _write(root, f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", governor + "\n")
    _write(root, "proc/cmdline", "BOOT_IMAGE=/vmlinuz intel_iommu=on isolcpus=2-7\n")


def test_tuning_audit_reports_settings_and_findings_once_until_they_change(tmp_path: Path) -> None:
    _tuning_tree(tmp_path, "powersave")
    tuning = TuningCollector(proc=tmp_path / "proc", sys=tmp_path / "sys")
    first = tuning.collect(time.time()).node_info["tuning"]
    assert first["thp_enabled"] == "madvise" and first["thp_defrag"] == "defer"
    assert (first["hugepages_total"], first["hugepage_size_kb"]) == (16, 2048)
    assert first["isolated_cpus"] == "2-7"
    assert first["cpu_governors"] == {"powersave": 4}
    assert "isolcpus=2-7" in first["kernel_cmdline"]
    text = " ".join(first["findings"])
    assert "powersave on 4 CPUs" in text and "not nohz_full" in text and "iommu=pt" in text
    assert tuning.collect(time.time()).node_info == {}  # unchanged: not sent again
    _tuning_tree(tmp_path, "performance")
    changed = tuning.collect(time.time()).node_info["tuning"]
    assert changed["cpu_governors"] == {"performance": 4}
    assert not any("governor" in f for f in changed["findings"])


def test_ipmitool_absent_means_no_ipmi_collector(tmp_path: Path) -> None:
    with pytest.raises(NotPresent, match="not installed"):
        IpmiPowerCollector(ipmitool=str(tmp_path / "ipmitool")).setup()


def test_dcmi_power_reading_is_parsed_and_inactive_readings_are_left_out() -> None:
    active = (
        "    Instantaneous power reading:                  5230 Watts\n"
        "    Minimum during sampling period:                 80 Watts\n"
        "    Power reading state is:                   activated\n"
    )
    assert parse_dcmi(active) == 5230.0
    assert parse_dcmi(active.replace("activated", "deactivated")) is None
    assert parse_dcmi("Error: no DCMI") is None


@pytest.mark.process  # the collector runs (a stand-in for) ipmitool
def test_ipmi_collector_runs_ipmitool_on_the_slow_lane(tmp_path: Path) -> None:
    script = tmp_path / "ipmitool"  # an edge stand-in: the real binary needs a BMC
    script.write_text(
        "#!/bin/sh\necho '    Instantaneous power reading:   4100 Watts'\n"
        "echo '    Power reading state is:   activated'\n"
    )
    os.chmod(script, 0o755)
    ipmi = IpmiPowerCollector(ipmitool=str(script))
    ipmi.setup()
    assert ipmi.collect(time.time()).samples == {}
    (read,) = ipmi.slow_reads()
    assert read.read(time.time()).samples["node"][0]["power_w"] == 4100.0


def test_redfish_node_power_comes_from_the_facility_client() -> None:
    from fleetsim.peers.redfish_server import RedfishServer, RedfishTree

    mockup = Path(__file__).resolve().parents[1] / "data/facility/redfish/dmtf-mockup-server"
    server = RedfishServer(RedfishTree.from_mockup(mockup / "public-rackmount1")).start()
    try:
        collector = RedfishPowerCollector(server.url)
        collector.setup()
        (read,) = collector.slow_reads()
        sample = read.read(time.time()).samples["node"][0]
        collector.close()
    finally:
        server.stop()
    assert sample["power_w"] > 0
