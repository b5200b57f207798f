"""The metric catalogue: every field the protocol carries, as data.

Shared by the agent (what it may send), the backend (what it validates and which
storage columns exist) and the docs. Units are in the names (`_c`, `_w`, `_mhz`,
`_pct`, `_lpm`, `_kpa`, `_j`, `_ns`, `_mib`, `_bytes_s`); counters end in `_total`
or a cumulative unit (`_j`, `_ns`, `_kwh`). A field the device does not support
is *absent* from a sample, never zero.

`lo`/`hi` bound a plausible reading. They double as the guard against DCGM's
"blank" sentinels (int32 2147483632+, int64 9223372036854775792+, fp64 2**47),
none of which fits inside any range below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricKind = Literal["gauge", "counter"]
SampleKind = Literal["gpu", "node", "rack", "feed", "loop", "facility"]

SAMPLE_KINDS: tuple[SampleKind, ...] = ("gpu", "node", "rack", "feed", "loop", "facility")


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    kind: MetricKind
    lo: float
    hi: float
    help: str
    integer: bool = False  # stored as an integer column (bitmasks, counts)


def _g(name: str, lo: float, hi: float, help: str, integer: bool = False) -> Metric:
    return Metric(name, "gauge", lo, hi, help, integer)


def _c(name: str, hi: float, help: str, integer: bool = True) -> Metric:
    return Metric(name, "counter", 0, hi, help, integer)


_BIG = 1e13  # counters: below the fp64 blank sentinel (2**47 ≈ 1.4e14)
_NS = 1e18  # ~31 years of nanoseconds: below the int64 blank sentinel (~9.2e18)

GPU_METRICS: tuple[Metric, ...] = (
    _g("util_gpu_pct", 0, 100, "GPU utilisation over the driver's sample period (%)"),
    _g("util_mem_pct", 0, 100, "memory-controller utilisation (%)"),
    _g("mem_used_mib", 0, 4_194_304, "framebuffer memory used (MiB)"),
    _g("mem_total_mib", 0, 4_194_304, "framebuffer memory total (MiB)"),
    _g("temp_gpu_c", -40, 200, "GPU die temperature (°C)"),
    _g("temp_mem_c", -40, 200, "HBM temperature (°C)"),
    _g("temp_margin_c", -100, 200, "'GPU T.Limit Temp': headroom below max-operating (°C)"),
    _g("power_w", 0, 5_000, "power, the driver's 1 s average (nvmlDeviceGetPowerUsage) (W)"),
    _g("power_instant_w", 0, 5_000, "instant power (NVML_FI_DEV_POWER_INSTANT) (W)"),
    _g("power_limit_w", 0, 5_000, "enforced power limit (W)"),
    _c("energy_j", _BIG, "energy since the driver loaded (J)", integer=False),
    _g("clock_sm_mhz", 0, 10_000, "SM clock (MHz)"),
    _g("clock_mem_mhz", 0, 20_000, "memory clock (MHz)"),
    _g("pstate", 0, 15, "performance state P0..P15", integer=True),
    _g("clock_event_reasons", 0, 0xFF_FFFF, "clock-event (throttle) reason bitmask", True),
    _c("violation_power_ns", _NS, "time held down by the power limit (ns)"),
    _c("violation_thermal_ns", _NS, "time held down by thermal limits (ns)"),
    _c("slowdown_sw_thermal_ns", _NS, "time in SW thermal slowdown (ns)"),
    _c("slowdown_hw_thermal_ns", _NS, "time in HW thermal slowdown (ns)"),
    _c("slowdown_hw_power_brake_ns", _NS, "time in HW power-brake slowdown (ns)"),
    _c("ecc_sbe_vol_total", 2_000_000_000, "volatile single-bit ECC errors"),
    _c("ecc_dbe_vol_total", 2_000_000_000, "volatile double-bit ECC errors"),
    _c("remapped_rows_correctable", 100_000, "rows remapped for correctable errors"),
    _c("remapped_rows_uncorrectable", 100_000, "rows remapped for uncorrectable errors"),
    _g("remap_pending", 0, 1, "a row remap is pending a GPU reset (0/1)", integer=True),
    _g("remap_failure", 0, 1, "a row remap failed (0/1)", integer=True),
    _c("pcie_replay_total", 2_000_000_000, "PCIe replay counter"),
    _g("pcie_tx_kib_s", 0, 1e9, "PCIe transmit throughput (KiB/s)"),
    _g("pcie_rx_kib_s", 0, 1e9, "PCIe receive throughput (KiB/s)"),
    _g("nvlink_up", 0, 64, "NVLink links up", integer=True),
    _c("nvlink_crc_errors_total", 2_000_000_000, "NVLink CRC errors, all links"),
    _c("nvlink_replay_total", 2_000_000_000, "NVLink replay errors, all links"),
    _c("nvlink_recovery_total", 2_000_000_000, "NVLink recovery errors, all links"),
    _g("fan_pct", 0, 100, "fan speed (%)"),
)

NODE_METRICS: tuple[Metric, ...] = (
    _g("cpu_pct", 0, 100, "CPU busy, all cores (%)"),
    _g("load1", 0, 100_000, "1-minute load average"),
    _g("mem_used_mib", 0, 1e9, "host memory used (MiB)"),
    _g("mem_total_mib", 0, 1e9, "host memory total (MiB)"),
    _g("temp_cpu_c", -40, 200, "hottest CPU package (hwmon) (°C)"),
    _g("temp_inlet_c", -40, 100, "inlet air (°C)"),
    _g("temp_outlet_c", -40, 150, "outlet/exhaust air (°C)"),
    _g("power_w", 0, 200_000, "node input power, IPMI DCMI or Redfish (W)"),
    _g("disk_read_bytes_s", 0, 1e12, "disk read throughput (bytes/s)"),
    _g("disk_write_bytes_s", 0, 1e12, "disk write throughput (bytes/s)"),
    _g("net_rx_bytes_s", 0, 1e12, "network receive throughput (bytes/s)"),
    _g("net_tx_bytes_s", 0, 1e12, "network transmit throughput (bytes/s)"),
)

RACK_METRICS: tuple[Metric, ...] = (
    _g("power_w", 0, 2_000_000, "measured rack power, the sum of its feeds (W)"),
    _c("energy_kwh", _BIG, "rack energy (kWh)", integer=False),
    _g("temp_inlet_c", -40, 100, "rack inlet air (°C)"),
    _g("temp_outlet_c", -40, 150, "rack outlet air (°C)"),
    _g("humidity_pct", 0, 100, "relative humidity (%)"),
    _g("liquid_supply_c", -10, 100, "liquid supply to the rack (°C)"),
    _g("liquid_return_c", -10, 120, "liquid return from the rack (°C)"),
    _g("liquid_flow_lpm", 0, 100_000, "liquid flow through the rack (L/min)"),
    _g("liquid_dp_kpa", -1_000, 10_000, "liquid differential pressure (kPa)"),
    _g("leak", 0, 2, "leak detection: 0 ok, 1 warning, 2 critical", integer=True),
)

FEED_METRICS: tuple[Metric, ...] = (
    _g("power_w", 0, 2_000_000, "feed power (W)"),
    _g("current_a", 0, 10_000, "feed current, the most loaded phase (A)"),
    _g("voltage_v", 0, 1_000, "feed voltage (V)"),
    _c("energy_kwh", _BIG, "feed energy (kWh)", integer=False),
)

LOOP_METRICS: tuple[Metric, ...] = (
    _g("supply_c", -10, 100, "secondary (IT-side) supply temperature (°C)"),
    _g("return_c", -10, 120, "secondary return temperature (°C)"),
    _g("delta_c", -50, 100, "return minus supply (°C)"),
    _g("flow_lpm", 0, 100_000, "secondary flow (L/min)"),
    _g("supply_kpa", -1_000, 10_000, "supply pressure (kPa)"),
    _g("return_kpa", -1_000, 10_000, "return pressure (kPa)"),
    _g("dp_kpa", -1_000, 10_000, "differential pressure (kPa)"),
    _g("heat_removed_kw", -100, 100_000, "heat removed (kW)"),
    _g("primary_supply_c", -10, 100, "primary (facility-side) supply temperature (°C)"),
    _g("primary_return_c", -10, 120, "primary return temperature (°C)"),
    _g("primary_flow_lpm", 0, 1_000_000, "primary flow (L/min)"),
    _g("pump_speed_pct", 0, 100, "mean speed of running pumps (%); 0 when none runs"),
    _g("pumps_running", 0, 64, "pumps running", integer=True),
    _g("pumps_failed", 0, 64, "pumps reporting a failure", integer=True),
    _g("leak", 0, 2, "leak detection: 0 ok, 1 warning, 2 critical", integer=True),
    _g("reservoir_low", 0, 1, "reservoir fluid level low (0/1)", integer=True),
)

FACILITY_METRICS: tuple[Metric, ...] = (
    _g("total_power_w", 0, 1e10, "total facility power, utility meters (W)"),
    _g("it_power_w", 0, 1e10, "IT power at the metering point of the PUE category (W)"),
    _g("pue", 0.5, 10, "instantaneous PUE (total / IT)"),
    _g("pue_category", 0, 3, "ISO/IEC 30134-2 measurement category 0-3", integer=True),
    _g("cooling_power_w", 0, 1e10, "cooling plant power (W)"),
    _g("outdoor_c", -60, 70, "outdoor air (°C)"),
    _c("total_energy_kwh", _BIG, "facility energy (kWh)", integer=False),
    _c("it_energy_kwh", _BIG, "IT energy (kWh)", integer=False),
)

METRICS: dict[str, tuple[Metric, ...]] = {
    "gpu": GPU_METRICS,
    "node": NODE_METRICS,
    "rack": RACK_METRICS,
    "feed": FEED_METRICS,
    "loop": LOOP_METRICS,
    "facility": FACILITY_METRICS,
}

# Keys that identify a sample inside its kind (besides `ts`). A gpu/node sample
# belongs to the batch's node source; the others name their entity.
ENTITY_KEYS: dict[str, tuple[str, ...]] = {
    "gpu": ("gpu",),
    "node": (),
    "rack": ("rack",),
    "feed": ("rack", "feed"),
    "loop": ("loop",),
    "facility": (),
}


def metric_names(kind: str) -> tuple[str, ...]:
    return tuple(m.name for m in METRICS[kind])
